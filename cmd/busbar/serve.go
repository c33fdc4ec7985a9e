package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
)

// shutdownTimeout bounds how long SIGTERM waits for connections to close.
const shutdownTimeout = 15 * time.Second

func newServeCmd(env func(string) (string, bool)) *cobra.Command {
	settings := config.DefaultServer()
	envErr := settings.FromEnv(env)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker",
		Long: `Run the broker.

Every flag can also be set with an environment variable (BUSBAR_CONFIG,
BUSBAR_DATA, BUSBAR_AMQP, BUSBAR_HTTP, BUSBAR_MEMORY, BUSBAR_LOG_FORMAT,
BUSBAR_LOG_LEVEL); a flag wins over its variable.`,
		Example: `  busbar serve
  busbar serve --memory
  busbar serve --config Config.json --data /var/lib/busbar
  BUSBAR_AMQP=0.0.0.0:5672 busbar serve --log-format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if envErr != nil {
				return usageError{envErr}
			}
			if err := settings.Validate(); err != nil {
				return usageError{err}
			}
			logger, err := newLogger(cmd.ErrOrStderr(), settings.LogFormat, settings.LogLevel)
			if err != nil {
				return usageError{err}
			}
			return serve(cmd.Context(), settings, logger)
		},
	}
	f := cmd.Flags()
	f.StringVar(&settings.ConfigFile, "config", settings.ConfigFile, "emulator-style Config.json declaring entities")
	f.StringVar(&settings.DataDir, "data", settings.DataDir, "data directory")
	f.StringVar(&settings.AMQPAddr, "amqp", settings.AMQPAddr, "AMQP listen address")
	f.StringVar(&settings.HTTPAddr, "http", settings.HTTPAddr, "HTTP listen address (health, admin)")
	f.BoolVar(&settings.Memory, "memory", settings.Memory, "keep everything in memory; nothing is persisted")
	f.StringVar(&settings.LogFormat, "log-format", settings.LogFormat, "log format: text or json")
	f.StringVar(&settings.LogLevel, "log-level", settings.LogLevel, "log level: debug, info, warn or error")
	return cmd
}

func serve(ctx context.Context, settings config.Server, logger *slog.Logger) error {
	opts := server.Options{
		DataDir:  settings.DataDir,
		Memory:   settings.Memory,
		AMQPAddr: settings.AMQPAddr,
		HTTPAddr: settings.HTTPAddr,
		Logger:   logger,
	}
	if settings.ConfigFile != "" {
		ec, err := config.LoadEmulatorConfigFile(settings.ConfigFile)
		if err != nil {
			return err
		}
		opts.Entities = ec
	}
	srv, err := server.Start(ctx, opts)
	if err != nil {
		return err
	}
	<-ctx.Done()
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("stopped")
	return nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

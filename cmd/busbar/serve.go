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
	var envNames []string
	for _, st := range config.ServerSettings() {
		if !st.Hidden {
			envNames = append(envNames, st.Env)
		}
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker",
		Long: `Run the broker.

Every flag can also be set with an environment variable (` + strings.Join(envNames, ", ") + `);
a flag wins over its variable.`,
		Example: `  busbar serve
  busbar serve --memory
  busbar serve --config Config.json --data /var/lib/busbar
  busbar serve --amqps localhost:5671 --https localhost:5301 --dev-tls
  BUSBAR_AMQP=0.0.0.0:5672 busbar serve --log-format json`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	for _, st := range config.ServerSettings() {
		if st.Bool {
			f.Bool(st.Name, st.Default == "true", st.Usage)
		} else {
			f.String(st.Name, st.Default, st.Usage)
		}
		if st.Hidden {
			_ = f.MarkHidden(st.Name) // the flag was just declared
		}
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		settings := config.DefaultServer()
		if err := settings.FromEnv(env); err != nil {
			return usageError{err}
		}
		for _, st := range config.ServerSettings() {
			if fl := cmd.Flags().Lookup(st.Name); fl.Changed {
				if err := settings.Set(st.Name, fl.Value.String()); err != nil {
					return usageError{fmt.Errorf("--%s: %w", st.Name, err)}
				}
			}
		}
		if err := settings.Validate(); err != nil {
			return usageError{err}
		}
		logger, err := newLogger(cmd.ErrOrStderr(), settings.LogFormat, settings.LogLevel)
		if err != nil {
			return usageError{err}
		}
		return serve(cmd.Context(), settings, logger)
	}
	return cmd
}

func serve(ctx context.Context, settings config.Server, logger *slog.Logger) error {
	srv, err := server.Start(ctx, server.Options{Server: settings, Logger: logger})
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

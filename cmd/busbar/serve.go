package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/server"
)

// shutdownTimeout bounds how long SIGTERM waits for connections to close.
const shutdownTimeout = 15 * time.Second

func newServeCmd(env func(string) (string, bool)) *cobra.Command {
	var envNames []string
	for _, st := range config.ServerSettings() {
		envNames = append(envNames, st.Env)
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
	opts := server.Options{
		DataDir:     settings.DataDir,
		Memory:      settings.Memory,
		AMQPAddr:    settings.AMQPAddr,
		HTTPAddr:    settings.HTTPAddr,
		AMQPSAddr:   settings.AMQPSAddr,
		HTTPSAddr:   settings.HTTPSAddr,
		TLSCert:     settings.TLSCert,
		TLSKey:      settings.TLSKey,
		DevTLS:      settings.DevTLS,
		AllowAnyKey: settings.AllowAnyKey,
		Entra: auth.EntraConfig{
			DevDefaultRole: settings.EntraDevRole,
			Issuers:        config.SplitList(settings.OIDCIssuers),
			Audiences:      config.SplitList(settings.OIDCAudiences),
			Tenants:        config.SplitList(settings.OIDCTenants),
			ClockSkew:      settings.OIDCClockSkew,
		},
		Salvage:        settings.Salvage,
		PprofAddr:      settings.PprofAddr,
		MetricsOpen:    settings.MetricsOpen,
		Faults:         settings.Faults,
		MinFreeBytes:   settings.MinFreeBytes,
		MinFreePercent: settings.MinFreePercent,
		Logger:         logger,
		AMQP:           amqpConfig(settings),

		MaxUnsettledPerLink: settings.MaxUnsettledPerLink,
	}
	mode, err := auth.ParseEntraMode(settings.Entra)
	if err != nil {
		return usageError{err}
	}
	opts.Entra.Mode = mode
	specs, err := settings.PolicyList()
	if err != nil {
		return usageError{err}
	}
	for _, p := range specs {
		rights := auth.Manage
		if len(p.Rights) > 0 {
			if rights, err = auth.ParseRights(strings.Join(p.Rights, ",")); err != nil {
				return usageError{fmt.Errorf("--policies: %w", err)}
			}
		}
		opts.Policies = append(opts.Policies, auth.Policy{Name: p.Name, PrimaryKey: p.Key, Rights: rights})
	}
	if file := settings.EffectiveConfigFile(fileExists); file != "" {
		logger.Info("loading entities", "config", file)
		ec, err := config.LoadEmulatorConfigFile(file)
		if err != nil {
			return err
		}
		for _, w := range ec.Warnings {
			logger.Warn("config: " + w.Error())
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

// fileExists reports whether path names something that exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// amqpConfig maps the AMQP limits of settings, where 0 turns a limit
// off, to amqp.Config, where 0 selects the default and a negative value
// turns it off.
func amqpConfig(s config.Server) amqp.Config {
	off := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	cfg := amqp.Config{
		MaxConnections:                s.MaxConnections,
		MaxLinks:                      s.MaxLinks,
		MaxSessions:                   off(s.MaxSessions),
		MaxUnauthenticatedConnections: off(s.MaxUnauthenticatedConnections),
		AuthTimeout:                   s.AuthTimeout,
		HandshakeTimeout:              s.HandshakeTimeout,
	}
	if s.AuthTimeout == 0 {
		cfg.AuthTimeout = -1
	}
	return cfg
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

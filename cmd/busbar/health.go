package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/busbarmq/busbar/internal/config"
)

// healthTimeout bounds one health probe.
const healthTimeout = 3 * time.Second

// newHealthCmd is `busbar health`: it asks a running broker's HTTP
// listener for /health and exits 0 only on 200. It is the container
// image's health check (a scratch image has no curl), so by default it
// reads the address from BUSBAR_HTTP as serve does; a listener bound to
// every interface (0.0.0.0, ::) is probed on loopback.
func newHealthCmd(env func(string) (string, bool)) *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check that a running broker is healthy (exit 0) or not (exit 1)",
		Example: `  busbar health
  busbar health --http localhost:5300`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&addr, "http", "", "the broker's HTTP listen address (default $BUSBAR_HTTP, else "+config.DefaultHTTPAddr+")")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if addr == "" {
			if v, ok := env("BUSBAR_HTTP"); ok && strings.TrimSpace(v) != "" {
				addr = strings.TrimSpace(v)
			} else {
				addr = config.DefaultHTTPAddr
			}
		}
		target, err := probeAddr(addr)
		if err != nil {
			return usageError{err}
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), healthTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target+"/health", nil)
		if err != nil {
			return usageError{err}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("health: cannot reach the broker at %s: %w", target, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		text := strings.TrimSpace(string(body))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s answered %s: %s", target, resp.Status, text)
		}
		fmt.Fprintln(cmd.OutOrStdout(), text)
		return nil
	}
	return cmd
}

// probeAddr turns a listen address into one to connect to: an empty or
// unspecified host becomes the loopback address.
func probeAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--http %q is not a host:port address", listen)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port), nil
}

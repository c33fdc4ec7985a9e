// Package busbar starts Busbar, the Azure Service Bus broker, in a container
// for Go tests, in the manner of testcontainers-go's modules:
//
//	ctx := context.Background()
//	c, err := busbar.Run(ctx, busbar.DefaultImage,
//		busbar.WithConfigFile("testdata/Config.json"), // the emulator's Config.json format
//		busbar.WithPolicy("app", "my-key", "Send", "Listen"))
//	if err != nil { … }
//	defer testcontainers.TerminateContainer(c)
//	cs, err := c.ConnectionString(ctx)  // for azservicebus.NewClientFromConnectionString
//
// The image is built from Busbar's repository (docker build -t busbar .);
// DefaultImage names it. The container keeps its data in memory unless
// WithPersistence is given, listens on 5672 (AMQP), 5671 (AMQP over TLS),
// 5300 (management API and /health) and 5301 (management API over TLS),
// and is ready when GET /health answers 200.
//
// Connection strings carry UseDevelopmentEmulator=true, so the SDKs speak
// plain AMQP to the mapped port. The Go admin client always speaks HTTPS:
// AdminConnectionString points it at the mapped 5301 and TLSConfig trusts the
// container's development certificate (see the example in busbar_test.go).
package busbar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DefaultImage is the image `docker build -t busbar .` makes from Busbar's
// repository.
const DefaultImage = "busbar:latest"

// The ports the image exposes.
const (
	AMQPPort  = "5672/tcp"
	AMQPSPort = "5671/tcp"
	HTTPPort  = "5300/tcp"
	HTTPSPort = "5301/tcp"
)

// The emulator's well-known policy, which Busbar has by default.
const (
	DefaultKeyName = "RootManageSharedAccessKey"
	DefaultKey     = "SAS_KEY_VALUE"
)

// configPath is where the image looks for Busbar's own Config.json.
const configPath = "/config/Config.json"

// devCertPath is the development certificate the image makes on start.
const devCertPath = "/data/dev-tls/cert.pem"

// Container is a running Busbar container.
type Container struct {
	testcontainers.Container
	keyName, key string
}

// Run starts a Busbar container from img and waits until it is healthy.
// On error the container, if one was made, is returned too, so that the
// caller can terminate it.
func Run(ctx context.Context, img string, opts ...testcontainers.ContainerCustomizer) (*Container, error) {
	req := testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        img,
			ExposedPorts: []string{AMQPPort, AMQPSPort, HTTPPort, HTTPSPort},
			Env:          map[string]string{"BUSBAR_MEMORY": "true"},
			WaitingFor:   wait.ForHTTP("/health").WithPort(HTTPPort).WithStatusCodeMatcher(func(s int) bool { return s == 200 }),
		},
		Started: true,
	}
	for _, opt := range opts {
		if err := opt.Customize(&req); err != nil {
			return nil, fmt.Errorf("busbar: customize: %w", err)
		}
	}
	keyName, key, err := firstPolicy(req.Env["BUSBAR_POLICIES"])
	if err != nil {
		return nil, err
	}
	ctr, err := testcontainers.GenericContainer(ctx, req)
	var c *Container
	if ctr != nil {
		c = &Container{Container: ctr, keyName: keyName, key: key}
	}
	if err != nil {
		return c, fmt.Errorf("busbar: run %s: %w", img, err)
	}
	return c, nil
}

// WithConfig gives the container a Config.json (the Service Bus emulator's
// format) declaring its entities, read from r.
func WithConfig(r io.Reader) testcontainers.CustomizeRequestOption {
	return testcontainers.WithFiles(testcontainers.ContainerFile{Reader: r, ContainerFilePath: configPath, FileMode: 0o644})
}

// WithConfigFile gives the container the Config.json at path on the host.
func WithConfigFile(path string) testcontainers.CustomizeRequestOption {
	return testcontainers.WithFiles(testcontainers.ContainerFile{HostFilePath: path, ContainerFilePath: configPath, FileMode: 0o644})
}

// WithPolicy adds a shared access policy; the first one given replaces
// the default (RootManageSharedAccessKey / SAS_KEY_VALUE) and is the one
// the connection strings use. Rights are "Manage", "Send" and "Listen";
// none means Manage.
func WithPolicy(name, key string, rights ...string) testcontainers.CustomizeRequestOption {
	return func(req *testcontainers.GenericContainerRequest) error {
		if name == "" || key == "" || strings.ContainsAny(name+key, ";=:") {
			return fmt.Errorf("busbar: policy %q: name and key must be non-empty and hold no ';', '=' or ':'", name)
		}
		for _, r := range rights {
			switch strings.ToLower(r) {
			case "manage", "send", "listen":
			default:
				return fmt.Errorf("busbar: policy %q: %q is not a right (Manage, Send or Listen)", name, r)
			}
		}
		entry := name + "=" + key
		if len(rights) > 0 {
			entry += ":" + strings.Join(rights, ",")
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		if p := req.Env["BUSBAR_POLICIES"]; p != "" {
			entry = p + ";" + entry
		}
		req.Env["BUSBAR_POLICIES"] = entry
		return nil
	}
}

// WithPersistence keeps the data on disk in the container's /data volume
// instead of in memory, as a deployed broker does.
func WithPersistence() testcontainers.CustomizeRequestOption {
	return func(req *testcontainers.GenericContainerRequest) error {
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env["BUSBAR_MEMORY"] = "false"
		return nil
	}
}

// firstPolicy returns the key name and key the connection strings use.
func firstPolicy(policies string) (string, string, error) {
	first, _, _ := strings.Cut(policies, ";")
	if strings.TrimSpace(first) == "" {
		return DefaultKeyName, DefaultKey, nil
	}
	name, rest, ok := strings.Cut(first, "=")
	key, _, _ := strings.Cut(rest, ":")
	if !ok || name == "" || key == "" {
		return "", "", fmt.Errorf("busbar: BUSBAR_POLICIES entry %q: want NAME=KEY[:RIGHTS]", first)
	}
	return name, key, nil
}

// ConnectionString returns the messaging connection string for the
// container's AMQP port, for azservicebus.NewClientFromConnectionString
// and the other SDKs.
func (c *Container) ConnectionString(ctx context.Context) (string, error) {
	addr, err := c.address(ctx, AMQPPort)
	if err != nil {
		return "", err
	}
	return connectionString(addr, c.keyName, c.key), nil
}

// AdminConnectionString returns the connection string for the Go admin
// client (azservicebus/admin), which always speaks HTTPS to the endpoint:
// it names the mapped management-over-TLS port. Give the client TLSConfig's
// trust (ClientOptions.Transport).
func (c *Container) AdminConnectionString(ctx context.Context) (string, error) {
	addr, err := c.address(ctx, HTTPSPort)
	if err != nil {
		return "", err
	}
	return connectionString(addr, c.keyName, c.key), nil
}

// AdminAddress returns host:port of the management API over plain HTTP
// (the emulator's 5300), for clients that speak HTTP to the emulator and
// for `busbar --admin`.
func (c *Container) AdminAddress(ctx context.Context) (string, error) {
	return c.address(ctx, HTTPPort)
}

// TLSConfig returns a TLS configuration that trusts the container's
// development certificate, for the TLS ports (AdminConnectionString, and
// AMQP over TLS on the mapped 5671).
func (c *Container) TLSConfig(ctx context.Context) (*tls.Config, error) {
	rc, err := c.CopyFileFromContainer(ctx, devCertPath)
	if err != nil {
		return nil, fmt.Errorf("busbar: development certificate: %w", err)
	}
	defer rc.Close()
	pem, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("busbar: development certificate: %w", err)
	}
	return tlsConfig(pem)
}

// tlsConfig trusts the PEM certificates in pem.
func tlsConfig(pem []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("busbar: the development certificate holds no PEM certificate")
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// address returns host:port of a mapped container port.
func (c *Container) address(ctx context.Context, port string) (string, error) {
	host, err := c.Host(ctx)
	if err != nil {
		return "", fmt.Errorf("busbar: host: %w", err)
	}
	p, err := c.MappedPort(ctx, port)
	if err != nil {
		return "", fmt.Errorf("busbar: port %s: %w", port, err)
	}
	return net.JoinHostPort(host, p.Port()), nil
}

// connectionString formats a development connection string.
func connectionString(addr, keyName, key string) string {
	return "Endpoint=sb://" + addr + ";SharedAccessKeyName=" + keyName + ";SharedAccessKey=" + key + ";UseDevelopmentEmulator=true;"
}

package auth

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ConnectionString is a parsed Service Bus connection string such as
//
//	Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;
type ConnectionString struct {
	// Endpoint is the Endpoint value as written, e.g. "sb://localhost".
	Endpoint string
	// Host is the Endpoint's host[:port], e.g. "localhost" or
	// "127.0.0.1:5672" (the Go SDK's FullyQualifiedNamespace).
	Host                  string
	SharedAccessKeyName   string
	SharedAccessKey       string
	EntityPath            string
	SharedAccessSignature string
	// UseDevelopmentEmulator selects plain AMQP on port 5672 by default
	// instead of TLS on 5671.
	UseDevelopmentEmulator bool
}

// ParseConnectionString parses a connection string as the Go SDK does:
// "key=value" pairs separated by ';', keys case-insensitive (Endpoint,
// SharedAccessKeyName, SharedAccessKey, EntityPath, SharedAccessSignature,
// UseDevelopmentEmulator; others are ignored), values may contain '='.
// UseDevelopmentEmulator takes strconv.ParseBool values (true, True, 1, t).
// Endpoint is required, and so is either SharedAccessKeyName with
// SharedAccessKey, or SharedAccessSignature.
func ParseConnectionString(s string) (ConnectionString, error) {
	var cs ConnectionString
	for _, part := range strings.Split(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return ConnectionString{}, fmt.Errorf("auth: connection string part %q is not key=value", part)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch strings.ToLower(k) {
		case "endpoint":
			u, err := url.Parse(v)
			if err != nil {
				return ConnectionString{}, fmt.Errorf("auth: connection string Endpoint %q: %v", v, err)
			}
			cs.Endpoint, cs.Host = v, u.Host
		case "sharedaccesskeyname":
			cs.SharedAccessKeyName = v
		case "sharedaccesskey":
			cs.SharedAccessKey = v
		case "entitypath":
			cs.EntityPath = v
		case "sharedaccesssignature":
			cs.SharedAccessSignature = v
		case "usedevelopmentemulator":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return ConnectionString{}, fmt.Errorf("auth: connection string UseDevelopmentEmulator %q is not a boolean", v)
			}
			cs.UseDevelopmentEmulator = b
		}
	}
	switch {
	case cs.Endpoint == "":
		return ConnectionString{}, errors.New("auth: connection string has no Endpoint")
	case cs.Host == "":
		return ConnectionString{}, fmt.Errorf("auth: connection string Endpoint %q has no host (want sb://host[:port])", cs.Endpoint)
	case cs.SharedAccessSignature == "" && (cs.SharedAccessKeyName == "" || cs.SharedAccessKey == ""):
		return ConnectionString{}, errors.New("auth: connection string needs SharedAccessKeyName and SharedAccessKey, or SharedAccessSignature")
	}
	return cs, nil
}

// String formats cs as a connection string, omitting empty values.
func (cs ConnectionString) String() string {
	var b strings.Builder
	add := func(k, v string) {
		if v != "" {
			b.WriteString(k + "=" + v + ";")
		}
	}
	add("Endpoint", cs.Endpoint)
	add("SharedAccessKeyName", cs.SharedAccessKeyName)
	add("SharedAccessKey", cs.SharedAccessKey)
	add("SharedAccessSignature", cs.SharedAccessSignature)
	add("EntityPath", cs.EntityPath)
	if cs.UseDevelopmentEmulator {
		add("UseDevelopmentEmulator", "true")
	}
	return b.String()
}

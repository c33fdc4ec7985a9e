package auth

import (
	"strings"
	"testing"
)

func TestParseConnectionString(t *testing.T) {
	tests := []struct {
		in   string
		want ConnectionString
	}{
		{
			in: "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
			want: ConnectionString{Endpoint: "sb://localhost", Host: "localhost", SharedAccessKeyName: DefaultKeyName,
				SharedAccessKey: DefaultKey, UseDevelopmentEmulator: true},
		},
		{
			in: "endpoint=sb://127.0.0.1:5673/;SHAREDACCESSKEYNAME=k;sharedaccesskey=abc+/def==;EntityPath=q1;usedevelopmentemulator=True",
			want: ConnectionString{Endpoint: "sb://127.0.0.1:5673/", Host: "127.0.0.1:5673", SharedAccessKeyName: "k",
				SharedAccessKey: "abc+/def==", EntityPath: "q1", UseDevelopmentEmulator: true},
		},
		{
			in:   "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessSignature=SharedAccessSignature sr=a&sig=b=&se=1&skn=c;UseDevelopmentEmulator=0;Unknown=x",
			want: ConnectionString{Endpoint: "sb://ns.servicebus.windows.net/", Host: "ns.servicebus.windows.net", SharedAccessSignature: "SharedAccessSignature sr=a&sig=b=&se=1&skn=c"},
		},
		{
			in:   " Endpoint = sb://h ; SharedAccessKeyName = n ; SharedAccessKey = k ; UseDevelopmentEmulator = 1 ",
			want: ConnectionString{Endpoint: "sb://h", Host: "h", SharedAccessKeyName: "n", SharedAccessKey: "k", UseDevelopmentEmulator: true},
		},
	}
	for _, tt := range tests {
		got, err := ParseConnectionString(tt.in)
		if err != nil {
			t.Errorf("ParseConnectionString(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseConnectionString(%q) =\n %+v\nwant\n %+v", tt.in, got, tt.want)
		}
		again, err := ParseConnectionString(got.String())
		if err != nil || again != got {
			t.Errorf("round trip of %q via %q = %+v, %v", tt.in, got.String(), again, err)
		}
	}
	for _, bad := range []string{
		"",
		"SharedAccessKeyName=a;SharedAccessKey=b",
		"Endpoint=sb://h;SharedAccessKeyName=a",
		"Endpoint=sb://h;SharedAccessKey=b",
		"Endpoint=sb://h;SharedAccessKeyName=a;SharedAccessKey=b;UseDevelopmentEmulator=yes",
		"Endpoint=sb://h;garbage;SharedAccessKeyName=a;SharedAccessKey=b",
		"Endpoint=localhost;SharedAccessKeyName=a;SharedAccessKey=b",
		"Endpoint=sb://h%zz;SharedAccessKeyName=a;SharedAccessKey=b",
	} {
		if cs, err := ParseConnectionString(bad); err == nil {
			t.Errorf("ParseConnectionString(%q) = %+v; want error", bad, cs)
		} else if !strings.HasPrefix(err.Error(), "auth: ") {
			t.Errorf("error %q lacks the package prefix", err)
		}
	}
}

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTestCert makes a self-signed ECDSA P-256 certificate for 127.0.0.1
// in dir and returns the two files' paths and a pool that trusts it.
func writeTestCert(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// TestTLS runs the service with TLS_CERT_FILE and TLS_KEY_FILE and speaks
// to it as browsers do: HTTP/2 and HTTP/1.1, a create whose short_url says
// https, a redirect, and a second connection that resumes the first one's
// session instead of a full handshake.
func TestTLS(t *testing.T) {
	certFile, keyFile, roots := writeTestCert(t, t.TempDir())
	base, _, _ := startRun(t, map[string]string{
		"ADDR": "127.0.0.1:0", "TLS_CERT_FILE": certFile, "TLS_KEY_FILE": keyFile,
	})
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("base %q: want https", base)
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	h2 := &http.Client{Timeout: 30 * time.Second, CheckRedirect: noRedirect,
		Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer h2.CloseIdleConnections()
	resp, err := h2.Post(base+"/shorten", "application/json", strings.NewReader(`{"url":"https://example.com/tls"}`))
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Code     string `json:"code"`
		ShortURL string `json:"short_url"`
	}
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("create answered over %s, want HTTP/2", resp.Proto)
	}
	if want := base + "/" + created.Code; created.ShortURL != want {
		t.Errorf("short_url %q, want %q (the scheme from the connection)", created.ShortURL, want)
	}

	// HTTP/1.1 only, a new connection per request, and a session cache:
	// the second handshake resumes the first's session.
	h1 := &http.Client{Timeout: 30 * time.Second, CheckRedirect: noRedirect,
		Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{
			RootCAs: roots, NextProtos: []string{"http/1.1"}, ClientSessionCache: tls.NewLRUClientSessionCache(8)}}}
	for i, wantResumed := range []bool{false, true} {
		resp, err := h1.Get(base + "/" + created.Code)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://example.com/tls" {
			t.Errorf("redirect %d: %d to %q", i, resp.StatusCode, resp.Header.Get("Location"))
		}
		if resp.ProtoMajor != 1 {
			t.Errorf("redirect %d over %s, want HTTP/1.1", i, resp.Proto)
		}
		if resp.TLS == nil || resp.TLS.DidResume != wantResumed {
			t.Errorf("redirect %d: resumed %v, want %v", i, resp.TLS != nil && resp.TLS.DidResume, wantResumed)
		}
	}
}

// TestTLSBadFilesStopTheStart: a certificate that cannot be read fails
// run at once, naming the settings, rather than every handshake later.
func TestTLSBadFilesStopTheStart(t *testing.T) {
	dir := t.TempDir()
	certFile, _, _ := writeTestCert(t, dir)
	for name, env := range map[string]map[string]string{
		"missing key file": {"TLS_CERT_FILE": certFile, "TLS_KEY_FILE": filepath.Join(dir, "absent.pem")},
		"key is the cert":  {"TLS_CERT_FILE": certFile, "TLS_KEY_FILE": certFile},
	} {
		t.Run(name, func(t *testing.T) {
			env["ADDR"], env["METRICS_ADDR"] = "127.0.0.1:0", "off"
			// 30 s: a wrongly accepted file would serve until then.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := run(ctx, nil, func(k string) string { return env[k] }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "TLS_CERT_FILE") {
				t.Fatalf("run: %v, want an error naming TLS_CERT_FILE", err)
			}
		})
	}
}

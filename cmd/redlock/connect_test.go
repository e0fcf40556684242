package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
)

// oneLinePerMessage checks redlock's stderr: every line names redlock once,
// not again for each error it wraps ("redlock: redlock: ...").
func oneLinePerMessage(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if strings.Count(line, "redlock: ") > 1 {
			t.Errorf("stderr line repeats its prefix: %q", line)
		}
	}
}

// silent accepts TCP connections and never answers, as a master that
// hangs would; it returns its address and the connections it accepted.
func silent(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for len(conns) > 0 {
			(<-conns).Close()
		}
	})
	return ln.Addr().String(), conns
}

// A signal that arrives while redlock connects to the masters ends it at
// once, not once the connection gives up.
func TestSignalWhileConnecting(t *testing.T) {
	t.Parallel()
	addr, conns := silent(t)
	ran := filepath.Join(t.TempDir(), "ran")
	a := start(t, nil, "run", "--masters", addr, "--key", "k", "--wait", "60s", "--", "touch", ran)
	// redlock listens for signals before it connects: once its connection
	// shows, a SIGTERM ends its connecting rather than killing it.
	select {
	case <-conns:
	case <-time.After(timeout):
		t.Fatalf("redlock did not connect; stderr:\n%s", a.stderr.String())
	}
	sent := time.Now()
	signalProc(t, a, syscall.SIGTERM)
	code := a.wait(t)
	took := time.Since(sent)
	if code != 128+int(syscall.SIGTERM) || exists(ran) {
		t.Errorf("exit %d, ran %v; want %d without running; stderr:\n%s", code, exists(ran), 128+int(syscall.SIGTERM), a.stderr.String())
	}
	if !strings.Contains(a.stderr.String(), "while connecting") {
		t.Errorf("stderr does not say redlock was connecting:\n%s", a.stderr.String())
	}
	// The connection, left alone, gives up after dialTimeout: redlock did
	// not wait for that.
	if took >= dialTimeout {
		t.Errorf("redlock exited %v after the signal, no sooner than the connection's own timeout (%v)", took, dialTimeout)
	}
	oneLinePerMessage(t, a.stderr.String())
}

// --tls against a plaintext master fails soon, saying so, for run and for
// status.
func TestTLSAgainstAPlaintextMaster(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, 1)[0]
	ran := filepath.Join(t.TempDir(), "ran")
	for _, a := range [][]string{
		{"run", "--masters", s.Addr(), "--tls", "--key", "k", "--", "touch", ran},
		{"run", "--masters", "rediss://" + s.Addr(), "--key", "k", "--", "touch", ran},
		{"status", "--masters", s.Addr(), "--tls", "--key", "k"},
	} {
		began := time.Now()
		code, stdout, stderr := runRedlock(t, nil, a...)
		took := time.Since(began)
		if code != exitFailure || exists(ran) {
			t.Errorf("%q: exit %d, ran %v; want %d without running; stderr:\n%s", a, code, exists(ran), exitFailure, stderr)
		}
		if out := stdout + stderr; !strings.Contains(out, "plaintext") || strings.Contains(out, "deadline") {
			t.Errorf("%q: the output does not say the master speaks plaintext:\n%s%s", a, stdout, stderr)
		}
		// Waiting for the TLS handshake alone would take dialTimeout.
		if took >= dialTimeout {
			t.Errorf("%q took %v, no sooner than the connection's own timeout (%v)", a, took, dialTimeout)
		}
		oneLinePerMessage(t, stderr)
	}
}

// writeCA writes, in dir, a new CA's certificate (ca.pem) and a server
// certificate for 127.0.0.1 that it signed (cert.pem, key.pem).
func writeCA(t *testing.T, dir string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redlock test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*pem.Block{
		"ca.pem":   {Type: "CERTIFICATE", Bytes: caDER},
		"cert.pem": {Type: "CERTIFICATE", Bytes: leafDER},
		"key.pem":  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// A TLS master: the certificate is verified against --tls-ca, by the
// master's address; one signed by another CA is refused, and not taken for
// a plaintext server.
func TestTLSMaster(t *testing.T) {
	t.Parallel()
	dir, other := t.TempDir(), t.TempDir()
	writeCA(t, dir)
	writeCA(t, other)
	port := freePort(t)
	redistest.Start(t, 1, redistest.Options{Args: []string{"--tls-port", port,
		"--tls-cert-file", filepath.Join(dir, "cert.pem"), "--tls-key-file", filepath.Join(dir, "key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "--tls-auth-clients", "no"}})
	addr := net.JoinHostPort("127.0.0.1", port)
	ran := filepath.Join(dir, "ran")
	for _, masters := range [][]string{{"--masters", "rediss://" + addr}, {"--masters", addr, "--tls"}} {
		a := append(append([]string{"run"}, masters...), "--tls-ca", filepath.Join(dir, "ca.pem"), "--key", "k", "--", "touch", ran)
		if code, _, stderr := runRedlock(t, nil, a...); code != 0 || !exists(ran) {
			t.Errorf("%q: exit %d, ran %v; want 0 and ran; stderr:\n%s", a, code, exists(ran), stderr)
		}
		_ = os.Remove(ran)
	}
	code, _, stderr := runRedlock(t, nil, "run", "--masters", "rediss://"+addr, "--tls-ca", filepath.Join(other, "ca.pem"), "--key", "k", "--", "touch", ran)
	if code != exitFailure || exists(ran) || !strings.Contains(stderr, "certificate") || strings.Contains(stderr, "plaintext") {
		t.Errorf("another CA: exit %d, ran %v; want %d, not run, a certificate error; stderr:\n%s", code, exists(ran), exitFailure, stderr)
	}
}

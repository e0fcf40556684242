package chaos

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

//go:embed shim/clockshim.c
var shimSource []byte

// ErrNoCompiler is returned by BuildShim when no C compiler is on PATH.
var ErrNoCompiler = errors.New("chaos: no C compiler (gcc or cc) on PATH: the clock shim cannot be built")

// BuildShim compiles clockshim.c into dir and returns the path of the .so.
func BuildShim(dir string) (string, error) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			return "", ErrNoCompiler
		}
	}
	src := filepath.Join(dir, "clockshim.c")
	so := filepath.Join(dir, "clockshim.so")
	if err := os.WriteFile(src, shimSource, 0o644); err != nil {
		return "", err
	}
	out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", so, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("chaos: building the clock shim: %v: %s", err, out)
	}
	return so, nil
}

// A Clock controls the wall clock of the processes started with its Env:
// the shim maps the control file and reads it on every clock call.
// Methods are safe for concurrent use.
type Clock struct {
	so, path string

	mu     sync.Mutex
	f      *os.File
	seq    int64
	offset int64 // ns
	rate   int64 // ppm
	anchor int64 // ns, real
}

// NewClock creates a control file at path (real time, rate 1) for the shim at so.
func NewClock(so, path string) (*Clock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	c := &Clock{so: so, path: path, f: f, rate: 1_000_000}
	// The shim maps a whole page; give the file one so reads past the
	// fields never fault.
	if err := f.Truncate(4096); err != nil {
		f.Close()
		return nil, err
	}
	if err := c.write(); err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

// Env is what a process needs in its environment to run on this clock.
func (c *Clock) Env() []string {
	return []string{"LD_PRELOAD=" + c.so, "CLOCKSHIM_FILE=" + c.path}
}

// Jump moves the clock by d (negative: backwards) at once.
func (c *Clock) Jump(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += int64(d)
	return c.write()
}

// Rate makes the clock run r times as fast as real time from now on,
// without a jump.
func (c *Clock) Rate(r float64) error {
	if r <= 0 {
		return fmt.Errorf("chaos: clock rate must be > 0, got %v", r)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now().UnixNano()
	fake := c.fake(now)
	c.anchor = now
	c.rate = int64(r * 1e6)
	c.offset = fake - now // fake(now) stays where it was
	return c.write()
}

// Now is the time the shimmed processes see.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Unix(0, c.fake(time.Now().UnixNano()))
}

// Close removes nothing the shim has mapped; it only closes the file.
func (c *Clock) Close() error { return c.f.Close() }

func (c *Clock) fake(real int64) int64 {
	return c.anchor + (real-c.anchor)/1_000_000*c.rate + (real-c.anchor)%1_000_000*c.rate/1_000_000 + c.offset
}

// write updates the control file in place under the shim's sequence lock:
// seq odd, the fields, seq even. Never truncate: the file is mapped.
func (c *Clock) write() error {
	var b [8]byte
	c.seq++
	binary.LittleEndian.PutUint64(b[:], uint64(c.seq))
	if _, err := c.f.WriteAt(b[:], 0); err != nil {
		return err
	}
	var fields [24]byte
	binary.LittleEndian.PutUint64(fields[0:], uint64(c.offset))
	binary.LittleEndian.PutUint64(fields[8:], uint64(c.rate))
	binary.LittleEndian.PutUint64(fields[16:], uint64(c.anchor))
	if _, err := c.f.WriteAt(fields[:], 8); err != nil {
		return err
	}
	c.seq++
	binary.LittleEndian.PutUint64(b[:], uint64(c.seq))
	_, err := c.f.WriteAt(b[:], 0)
	return err
}

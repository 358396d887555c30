package highwater_test

// Shared by the tests: the database test.sh prepared (DATABASE_URL, with testdata/ applied), real
// dispatcher processes started from $HIGHWATER_BIN, and small helpers. No mocks: every test talks
// to a real PostgreSQL and real dispatchers.

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

var (
	databaseURL  string
	highwaterBin string
	// test.sh's temporary directory: pid files of the dispatchers, which it kills if the tests die.
	testTmp string

	pool  *pgxpool.Pool
	sqlDB *sql.DB
	// The dispatcher of the group default, which runs order-projection; shared by the tests.
	defaultDispatcher *dispatcher
)

// authToken is the bearer token every dispatcher started here accepts on its HTTP endpoints.
var authToken = "test-token-" + randomHex(8)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	for name, v := range map[string]*string{"DATABASE_URL": &databaseURL, "HIGHWATER_BIN": &highwaterBin, "HW_TEST_TMP": &testTmp} {
		if *v = os.Getenv(name); *v == "" {
			// Failing, not skipping: a run that skipped everything would look like a pass.
			fmt.Fprintf(os.Stderr, "%s is not set: run the tests with clients/go/test.sh\n", name)
			return 1
		}
	}
	ctx := context.Background()
	var err error
	if pool, err = pgxpool.New(ctx, databaseURL); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	if sqlDB, err = sql.Open("pgx", databaseURL); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer sqlDB.Close()
	if defaultDispatcher, err = startDispatcher("default"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer defaultDispatcher.stop()
	return m.Run()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// uid is a fresh id, so that tests never share a stream.
func uid(prefix string) string { return prefix + "-" + randomHex(4) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type dispatcher struct {
	url     string
	cmd     *exec.Cmd
	pidFile string
	exited  chan struct{}
	log     *tailBuffer
	once    sync.Once
}

// tailBuffer keeps the end of the dispatcher's stderr for failure messages.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if t.buf.Len() > 8000 {
		t.buf.Next(t.buf.Len() - 4000)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

// startDispatcher starts `highwater dispatch --group GROUP` and waits until /readyz answers 200.
func startDispatcher(group string) (*dispatcher, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &dispatcher{url: fmt.Sprintf("http://127.0.0.1:%d", port), exited: make(chan struct{}), log: &tailBuffer{}}
	d.cmd = exec.Command(highwaterBin, "dispatch", "--group", group, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--shutdown-grace", "1s", "--metrics-interval", "1s")
	d.cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL, "HIGHWATER_SSE_TOKENS="+authToken,
		"HIGHWATER_INSTANCE_ID="+uid(group))
	d.cmd.Stderr = d.log
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	pids := filepath.Join(testTmp, "pids")
	if err := os.MkdirAll(pids, 0o755); err != nil {
		d.stop()
		return nil, err
	}
	d.pidFile = filepath.Join(pids, strconv.Itoa(d.cmd.Process.Pid))
	if err := os.WriteFile(d.pidFile, nil, 0o644); err != nil {
		d.stop()
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-d.exited:
			return nil, fmt.Errorf("dispatcher exited with %v:\n%s", d.cmd.ProcessState, d.log)
		default:
		}
		if r, err := http.Get(d.url + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return d, nil
			}
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("dispatcher not ready after 20 s:\n%s", d.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM, then SIGKILL after 5 s, and waits for the exit.
func (d *dispatcher) stop() {
	d.once.Do(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(5 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
		if d.pidFile != "" {
			_ = os.Remove(d.pidFile)
		}
	})
}

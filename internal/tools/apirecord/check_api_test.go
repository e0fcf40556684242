package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scratchTree writes a copy of scripts/check-api.sh and of this command into
// a new directory, with a root module, redlockotel and chaos, each with one
// public package, and a main-only module; it records their API with
// check-api.sh -w and returns the directory.
func scratchTree(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":               "module github.com/redlock-go/redlock\n\ngo 1.26\n",
		"lock.go":              "package redlock\n\nfunc Obtain() {}\n",
		"redlocktest/fake.go":  "package redlocktest\n\nfunc Fake() {}\n",
		"redlockotel/go.mod":   "module github.com/redlock-go/redlock/redlockotel\n\ngo 1.26\n",
		"redlockotel/otel.go":  "package redlockotel\n\nfunc Observer() {}\n",
		"chaos/go.mod":         "module github.com/redlock-go/redlock/chaos\n\ngo 1.26\n",
		"chaos/harness.go":     "package chaos\n\nfunc Partition() {}\n",
		"bench/go.mod":         "module github.com/redlock-go/redlock/bench\n\ngo 1.26\n",
		"bench/main.go":        "package main\n\nfunc main() {}\n",
		"scripts/check-api.sh": "",
	}
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sources {
		if !strings.HasSuffix(name, "_test.go") {
			files["internal/tools/apirecord/"+name] = ""
		}
	}
	for name, text := range files {
		if text == "" {
			b, err := os.ReadFile(filepath.Join(repo, name))
			if err != nil {
				t.Fatal(err)
			}
			text = string(b)
		}
		write(t, filepath.Join(dir, name), text)
	}
	if out, err := checkAPI(dir, "-w"); err != nil {
		t.Fatalf("check-api.sh -w: %v\n%s", err, out)
	}
	if out, err := checkAPI(dir); err != nil {
		t.Fatalf("check-api.sh on the tree it recorded: %v\n%s", err, out)
	}
	return dir
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkAPI runs scripts/check-api.sh in the tree dir.
func checkAPI(dir string, args ...string) (string, error) {
	cmd := exec.Command("bash", append([]string{filepath.Join(dir, "scripts/check-api.sh")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestCheckAPIRefusesAModuleWithPublicPackagesAndNoRecord: a new library
// module is in no record, so without this rule its API would change
// unchecked. A module of main packages only, or one listed as unrecorded
// (chaos), needs none.
func TestCheckAPIRefusesAModuleWithPublicPackagesAndNoRecord(t *testing.T) {
	dir := scratchTree(t)
	write(t, filepath.Join(dir, "redlockprom/go.mod"), "module github.com/redlock-go/redlock/redlockprom\n\ngo 1.26\n")
	write(t, filepath.Join(dir, "redlockprom/prom.go"), "package redlockprom\n\nfunc Register() {}\n")
	out, err := checkAPI(dir)
	if err == nil || !strings.Contains(out, "the module in redlockprom has public packages and no record") {
		t.Errorf("check-api.sh with an unrecorded library module: err %v, output:\n%s", err, out)
	}
}

// TestCheckAPIRefusesARecordWithoutAPackageOrWithoutAFile: a package whose
// lines are all missing from the record, or a record file that is gone,
// fails the check as a single changed line does.
func TestCheckAPIRefusesARecordWithoutAPackageOrWithoutAFile(t *testing.T) {
	dir := scratchTree(t)
	record := filepath.Join(dir, "api/redlock.txt")
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.Contains(l, "/redlocktest,") {
			kept = append(kept, l)
		}
	}
	write(t, record, strings.Join(kept, ""))
	out, err := checkAPI(dir)
	if err == nil || !strings.Contains(out, "+pkg github.com/redlock-go/redlock/redlocktest, func Fake()") {
		t.Errorf("check-api.sh with redlocktest missing from the record: err %v, output:\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(dir, "api/redlockotel.txt")); err != nil {
		t.Fatal(err)
	}
	out, err = checkAPI(dir)
	if err == nil || !strings.Contains(out, "api/redlockotel.txt is missing") {
		t.Errorf("check-api.sh without api/redlockotel.txt: err %v, output:\n%s", err, out)
	}
}

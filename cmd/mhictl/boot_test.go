package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep"
)

// firmwareDir writes a boot loader image where the SDX55's table entry
// names it (qcom/sdx55m/sbl1.mbn) and returns the directory and the image.
func firmwareDir(t *testing.T) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	img := make([]byte, 200_000)
	for i := range img {
		img[i] = byte(i*7) ^ byte(i>>10)
	}
	p := filepath.Join(dir, "qcom", "sdx55m", "sbl1.mbn")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, img, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, img
}

// checkDumpFile checks the file and the JSON report of 'mhictl dump'
// against the mock modem's RAM dump.
func checkDumpFile(t *testing.T, out, file string) {
	t.Helper()
	var res dumpResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("dump --json: %v: %s", err, out)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(ep.DumpPattern(ep.DefaultDumpSize))
	sum := sha256.Sum256(got)
	if sum != want || res.SHA256 != hex.EncodeToString(want[:]) || res.Bytes != ep.DefaultDumpSize {
		t.Fatalf("dump: file %d bytes sha256 %x, reported %+v; want %d bytes sha256 %x", len(got), sum, res, ep.DefaultDumpSize, want)
	}
	t.Logf("dump: %+v", res)
}

// TestDumpEmbeddedMock: 'mhictl dump' on the embedded mock booting from
// PBL (the image from --firmware, checked by digest): the file holds the
// modem's RAM dump, byte for byte.
func TestDumpEmbeddedMock(t *testing.T) {
	dir, img := firmwareDir(t)
	sum := sha256.Sum256(img)
	file := filepath.Join(t.TempDir(), "dump.bin")
	out, err := run(t, "dump", "--boot-ee", "pbl", "--sbl-sha256", hex.EncodeToString(sum[:]), "--firmware", dir, "--out", file, "--json")
	if err != nil {
		t.Fatalf("dump: %v\n%s", err, out)
	}
	checkDumpFile(t, out, file)
	// Without the firmware the modem stays in PBL: a clear error.
	if out, err := run(t, "dump", "--boot-ee", "pbl", "--out", file); err == nil || !strings.Contains(err.Error(), "no firmware is configured") {
		t.Fatalf("dump without --firmware: %v\n%s", err, out)
	}
	// A wrong image is refused by the modem, with its error code.
	other := sha256.Sum256([]byte("another image"))
	if out, err := run(t, "dump", "--boot-ee", "pbl", "--sbl-sha256", hex.EncodeToString(other[:]), "--firmware", dir, "--out", file); err == nil ||
		!strings.Contains(err.Error(), "ERRCODE 0x"+strconv.Itoa(ep.BHIErrDigest)) {
		t.Fatalf("dump with a wrong image: %v\n%s", err, out)
	}
}

// TestServeBootPBLAndDump: 'mhictl modem serve --boot-ee pbl --rddm' in
// another process; 'mhictl dump --vfio-user --firmware' downloads the boot
// loader, crashes the modem into RDDM and writes its dump; the server logs
// the image as a bhi_image event with the file's size and digest.
func TestServeBootPBLAndDump(t *testing.T) {
	dir, img := firmwareDir(t)
	sum := sha256.Sum256(img)
	cmd, sock, l := serveModem(t, "--boot-ee", "pbl", "--sbl-sha256", hex.EncodeToString(sum[:]), "--rddm")
	file := filepath.Join(t.TempDir(), "dump.bin")
	out, err := run(t, "dump", "--vfio-user", sock, "--firmware", dir, "--out", file, "--json")
	if err != nil {
		t.Fatalf("dump: %v\n%s\nserver:\n%s", err, out, l)
	}
	checkDumpFile(t, out, file)
	sigterm(t, cmd, l)
	want := "msg=bhi_image stage=sbl bytes=" + strconv.Itoa(len(img)) + " sha256=" + hex.EncodeToString(sum[:]) + " accepted=true"
	if !strings.Contains(l.String(), want) {
		t.Fatalf("server log lacks %q:\n%s", want, l)
	}
	// The boot flags are the mock's: refused with a served modem.
	if out, err := run(t, "dump", "--vfio-user", sock, "--boot-ee", "pbl", "--out", file); err == nil || !strings.Contains(err.Error(), "--boot-ee") {
		t.Fatalf("dump --vfio-user --boot-ee: %v\n%s", err, out)
	}
}

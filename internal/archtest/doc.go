// Package archtest holds no code, only the test that keeps the module's
// import graph in the shape docs/ARCHITECTURE.md describes: the host
// stack free of everything else, the codecs neutral, the mock modem out
// of the product's imports. The test asks `go list` for the module's
// packages and fails, naming the import chain, when a forbidden import
// appears; it also keeps the rules and the import graph printed in
// docs/ARCHITECTURE.md up to date (GOMHI_UPDATE_DOCS=1 rewrites them).
//
// TestLockOrder (lockorder_test.go) keeps the locks of the host stack, the
// network device and the mock modem in the order their declarations state
// in `lockorder:` lines: it type-checks those packages from source, finds
// every lock taken while another is held, following calls, and fails on a
// nesting the declared order does not allow.
package archtest

// Package archtest holds no code, only the test that keeps the module's
// import graph in the shape docs/ARCHITECTURE.md describes: the host
// stack free of everything else, the codecs neutral, the mock modem out
// of the product's imports. The test asks `go list` for the module's
// packages and fails, naming the import chain, when a forbidden import
// appears; it also keeps the rules and the import graph printed in
// docs/ARCHITECTURE.md up to date (GOMHI_UPDATE_DOCS=1 rewrites them).
package archtest

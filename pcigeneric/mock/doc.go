// Package mock builds gomhi's mock modem from an entry of the real-modem
// table (pcigeneric): its identity, derived from the entry's product name,
// and the functions on its channel pairs — IP data, MBIM, QMI, AT — all
// sharing one cellular state (NewConfig, as the vfio-user server uses
// it), and the embedded mock joined to a host controller in this process
// by mhi/inproc (Open).
//
// It is its own package so that the real-modem table carries none of the
// mock: a program that drives only real modems imports pcigeneric without
// linking mhi/ep (internal/archtest checks it).
package mock

module github.com/gomhi/gomhi

go 1.26.8

require (
	github.com/spf13/cobra v1.10.2
	github.com/u-root/u-root v0.16.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

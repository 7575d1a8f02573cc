module github.com/fencegate/fencegate

go 1.26.8

require (
	github.com/goccy/go-yaml v1.19.2 // indirect
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
)

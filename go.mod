module github.com/ufp-dev/ufp

go 1.26.8

require github.com/gopacket/gopacket v1.7.7 // indirect

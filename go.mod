module github.com/sandboxd/sandboxd

go 1.26.8

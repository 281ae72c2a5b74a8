module github.com/kubeflake/kubeflake/clients/go

go 1.22

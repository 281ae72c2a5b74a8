module github.com/kubeflake/kubeflake/clients/go/bench

go 1.22

require (
	github.com/kubeflake/kubeflake/clients/go v0.0.0
	github.com/sony/sonyflake v1.2.0
)

replace github.com/kubeflake/kubeflake/clients/go => ../

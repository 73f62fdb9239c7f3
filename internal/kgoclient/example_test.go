package kgoclient_test

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kshare-go/kshare/internal/kgoclient"
)

// A client package applies the application's settings, validates them and
// builds its kgo client with its own options first.
func Example() {
	s := kgoclient.Defaults()
	for _, set := range []kgoclient.Setting{
		kgoclient.SeedBrokers("127.0.0.1:9092"),
		kgoclient.KgoOpts(kgo.ClientID("orders-service")),
	} {
		set(&s)
	}
	if err := s.Validate(); err != nil {
		fmt.Println("invalid:", err)
		return
	}
	cl, _, err := s.NewClient(kgo.ClientID("kshare"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close() // NewClient does not connect; nothing is sent here
	fmt.Println(cl.OptValue(kgo.ClientID))
	// Output: orders-service
}

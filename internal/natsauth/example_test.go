package natsauth_test

import (
	"flag"
	"fmt"

	"github.com/leafmq/leafmq/internal/natsauth"
)

// leafd registers the settings with the prefix "nats-", parses its
// arguments and turns them into connect options; printing the Config never
// shows the password, and errors name the flags.
func Example() {
	var auth natsauth.Config
	fs := flag.NewFlagSet("leafd", flag.ContinueOnError)
	auth.Flags(fs, "nats-")
	_ = fs.Parse([]string{"--nats-user", "leafd", "--nats-password", "s3cret"})

	fmt.Println(auth)
	fmt.Printf("%#v\n", auth)
	opts, err := auth.Options()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(opts), "option") // then: nats.Connect(url, opts...)

	auth.Token = "t0ken"
	fmt.Println(auth.Validate())
	// Output:
	// {User:leafd Password:xxxxx}
	// natsauth.Config{User:"leafd", Password:"xxxxx"}
	// 1 option
	// conflicting nats auth settings: --nats-user and --nats-token: use one way to authenticate: --nats-creds, --nats-nkey, --nats-user or --nats-token
}

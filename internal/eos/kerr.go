package eos

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

var kerrTopicExists = kerr.TopicAlreadyExists

// kerrFor turns an error code and message into an error (nil for none).
func kerrFor(code int16, msg *string) error {
	err := kerr.ErrorForCode(code)
	if err == nil || msg == nil || *msg == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, *msg)
}

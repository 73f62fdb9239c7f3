// Package kgoclient builds the kgo.Client that each kshare client package
// (producer, shareconsumer) runs on, from the connection settings they all
// take: seed brokers, TLS, SASL, pass-through kgo options and a slog
// logger that also receives kgo's own log lines.
//
// The packages keep their own exported option functions (producer.SASL,
// shareconsumer.SASL, ...), because applications configure each client
// separately; those functions are thin wrappers around the Setting values
// of this package, so that the settings are stored, validated and turned
// into a client in one place.
package kgoclient

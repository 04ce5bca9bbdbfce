// Package logging builds the daemon's zap logger from --log.level and
// --log.format, and the slog bridge that exporter-toolkit and promhttp take.
package logging

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/alecthomas/kingpin/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
)

// Config holds the logging flags.
type Config struct {
	Level  string
	Format string
}

// AddFlags adds --log.level and --log.format.
func AddFlags(app *kingpin.Application) *Config {
	c := &Config{}
	app.Flag("log.level", "Only log messages with the given severity or above: debug, info, warn, error.").
		Default("info").EnumVar(&c.Level, "debug", "info", "warn", "error")
	app.Flag("log.format", "Output format of log messages: console (one line: time, level, message, fields) or json.").
		Default("console").EnumVar(&c.Format, "console", "json")
	return c
}

// New returns a logger writing to w.
func New(c Config, w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	switch c.Format {
	case "json":
		encoder = zapcore.NewJSONEncoder(enc)
	default:
		enc.EncodeLevel = zapcore.LowercaseLevelEncoder
		enc.ConsoleSeparator = " "
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	core := zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core), nil
}

// Slog bridges a zap logger to log/slog for libraries that take *slog.Logger.
func Slog(l *zap.Logger) *slog.Logger {
	return slog.New(zapslog.NewHandler(l.Core()))
}

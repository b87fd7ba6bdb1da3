// Command clairconfig-check is the reference the operator's Rust config validator is held
// to: it loads each config file (with its drop-in folder) exactly as Clair v4.9.0 does
// (cmd.LoadConfig, strict) and validates it in each mode (config.Validate), printing one
// JSON line per file and mode: {"file", "mode", "ok", "error"}.
package main

import (
	"encoding/json"
	"os"

	"github.com/quay/clair/config"
	"github.com/quay/clair/v4/cmd"
)

type verdict struct {
	File  string `json:"file"`
	Mode  string `json:"mode"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

func main() {
	out := json.NewEncoder(os.Stdout)
	for _, path := range os.Args[1:] {
		for _, mode := range []string{"indexer", "matcher", "notifier"} {
			var cfg config.Config
			err := cmd.LoadConfig(&cfg, path, true)
			if err == nil {
				m, perr := config.ParseMode(mode)
				if perr != nil {
					panic(perr)
				}
				cfg.Mode = m
				_, err = config.Validate(&cfg)
			}
			v := verdict{File: path, Mode: mode, OK: err == nil}
			if err != nil {
				v.Error = err.Error()
			}
			if err := out.Encode(v); err != nil {
				os.Exit(2)
			}
		}
	}
}

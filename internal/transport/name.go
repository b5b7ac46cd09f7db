package transport

import (
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// ProgramName returns the program's base name, as client-go's default user
// agent has it, cut to the 128 characters a field manager may have; "ctrl"
// if it has none.
func ProgramName() string {
	name := ""
	if len(os.Args) > 0 {
		name = filepath.Base(os.Args[0])
	}
	name = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, name)
	if name == "" || name == "." || name == string(filepath.Separator) {
		return "ctrl"
	}
	if len(name) > 128 {
		name = name[:128]
	}
	return name
}

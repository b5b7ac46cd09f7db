package builtin

func Len() int { return len(table) }

func LookupName(name string) (Resource, bool) { r, ok := table[name]; return r, ok }

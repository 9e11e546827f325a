package membership

// Restarted returns the names of the members of cur that are also in old
// under another instance id: processes restarted under the same name (nil
// when none). nameID gives a member's name and instance id.
func Restarted[M any](old, cur []M, nameID func(M) (name, id string)) map[string]bool {
	var out map[string]bool
	ids := make(map[string]string, len(old))
	for _, m := range old {
		name, id := nameID(m)
		ids[name] = id
	}
	for _, m := range cur {
		name, id := nameID(m)
		if was, ok := ids[name]; ok && was != id {
			if out == nil {
				out = make(map[string]bool)
			}
			out[name] = true
		}
	}
	return out
}

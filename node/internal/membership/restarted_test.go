package membership

import "testing"

func TestRestarted(t *testing.T) {
	type m struct{ name, id string }
	nameID := func(x m) (string, string) { return x.name, x.id }
	old := []m{{"a", "1"}, {"b", "2"}, {"c", "3"}}
	cur := []m{{"a", "1"}, {"b", "9"}, {"d", "4"}}
	got := Restarted(old, cur, nameID)
	if len(got) != 1 || !got["b"] {
		t.Fatalf("Restarted = %v, want only b", got)
	}
	if got := Restarted(old, old, nameID); got != nil {
		t.Fatalf("no restart: %v, want nil", got)
	}
}

package ui

import (
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// Clean makes a string from the cluster or from a file safe to draw
// (docs/DESIGN.md, "Nothing raw reaches the terminal"): such a string may carry escape sequences that
// set the window title (OSC 0), write the clipboard (OSC 52), move the
// cursor to forge what is on screen (CSI) or hide text. Escape sequences are
// removed whole, CSI, OSC, DCS and the other string sequences with their
// payload, in their 7-bit (ESC [) and 8-bit (U+009B) forms; the other C0
// and C1 control characters and DEL go; tabs and line breaks become spaces,
// as every place that draws such a string draws one line; bytes that are not
// UTF-8 become U+FFFD, so no terminal reads them as 8-bit controls.
func Clean(s string) string {
	if isClean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	const (
		text = iota
		escape
		escapeIntermediate
		csi
		control // a string sequence: OSC, DCS, SOS, PM, APC
		controlEscape
	)
	state := text
	for _, r := range s {
		switch state {
		case controlEscape:
			// ESC \ ends a string sequence; an ESC followed by anything
			// else ends it too (as xterm reads it) and starts a new one.
			if r == '\\' {
				state = text
				continue
			}
			fallthrough
		case escape:
			switch {
			case r == '[':
				state = csi
			case r == ']' || r == 'P' || r == 'X' || r == '^' || r == '_':
				state = control
			case r >= 0x20 && r <= 0x2f:
				state = escapeIntermediate
			default:
				// A two-character sequence (ESC c resets the terminal).
				state = text
			}
			continue
		case escapeIntermediate:
			if r < 0x20 || r > 0x2f {
				state = text
			}
			continue
		case csi:
			// Parameters and intermediates, up to the final byte; anything
			// else ends the sequence and is read as text again.
			if r >= 0x20 && r <= 0x3f {
				continue
			}
			state = text
			if r >= 0x40 && r <= 0x7e {
				continue
			}
		case control:
			// Everything up to the terminator is the payload: dropped.
			switch r {
			case 0x07, 0x9c:
				state = text
			case 0x1b:
				state = controlEscape
			}
			continue
		}
		switch {
		case r == 0x1b:
			state = escape
		case r == 0x9b:
			state = csi
		case r == 0x9d || r == 0x90 || r == 0x98 || r == 0x9e || r == 0x9f:
			state = control
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case r < 0x20 || (r >= 0x7f && r <= 0x9f):
			// Other controls (BEL, backspace, NEL, ...) are dropped.
		default:
			// utf8.RuneError stands for a byte that is not UTF-8.
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isClean reports whether s is printable UTF-8 with no control character:
// most strings are, and are drawn as they are.
func isClean(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return false
		case c >= 0x80:
			return cleanUTF8(s[i:])
		}
	}
	return true
}

func cleanUTF8(s string) bool {
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// CleanStrings returns v with every string in it (in exported struct
// fields, slices, arrays, maps and behind pointers) passed through Clean.
// v itself is left as it is: what holds a changed string is copied, and
// what needs no change is shared, so a clean value costs a scan, not a copy.
// It is how a whole frame or report is made safe in one place, so a field
// added later cannot miss it.
func CleanStrings[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	if cleaned, changed := cleanValue(rv); changed {
		return cleaned.Interface().(T)
	}
	return v
}

// The types CleanStrings walks, worked out once per type: which exported
// fields of a struct can hold a string (a time.Time, say, cannot: its
// fields are unexported), so a frame of a thousand rows costs a look at
// its strings, not a reflection over every field of every row.
var (
	typePlans   sync.Map // reflect.Type → []int (struct) or bool (other)
	typePlansMu sync.Mutex
)

// stringFields are the indexes of t's exported fields that may hold a
// string.
func stringFields(t reflect.Type) []int {
	if p, ok := typePlans.Load(t); ok {
		return p.([]int)
	}
	typePlansMu.Lock()
	defer typePlansMu.Unlock()
	return planStruct(t, map[reflect.Type]bool{})
}

// mayHoldStrings says whether a value of type t can hold a string
// CleanStrings would reach.
func mayHoldStrings(t reflect.Type) bool {
	if p, ok := typePlans.Load(t); ok {
		if fields, isStruct := p.([]int); isStruct {
			return len(fields) > 0
		}
		return p.(bool)
	}
	typePlansMu.Lock()
	defer typePlansMu.Unlock()
	return plan(t, map[reflect.Type]bool{})
}

// plan works out (and records) whether t may hold strings; visiting guards
// against recursive types, which are taken to hold them.
func plan(t reflect.Type, visiting map[reflect.Type]bool) bool {
	if p, ok := typePlans.Load(t); ok {
		if fields, isStruct := p.([]int); isStruct {
			return len(fields) > 0
		}
		return p.(bool)
	}
	if visiting[t] {
		return true
	}
	var holds bool
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		holds = true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		visiting[t] = true
		holds = plan(t.Elem(), visiting)
	case reflect.Map:
		visiting[t] = true
		holds = plan(t.Key(), visiting) || plan(t.Elem(), visiting)
	case reflect.Struct:
		return len(planStruct(t, visiting)) > 0
	}
	typePlans.Store(t, holds)
	return holds
}

func planStruct(t reflect.Type, visiting map[reflect.Type]bool) []int {
	if p, ok := typePlans.Load(t); ok {
		return p.([]int)
	}
	visiting[t] = true
	fields := []int{}
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && plan(f.Type, visiting) {
			fields = append(fields, i)
		}
	}
	typePlans.Store(t, fields)
	return fields
}

// cleanValue returns v cleaned, and whether anything changed (when not,
// the value returned is v itself).
func cleanValue(v reflect.Value) (reflect.Value, bool) {
	switch v.Kind() {
	case reflect.String:
		s := v.String()
		if c := Clean(s); c != s {
			out := reflect.New(v.Type()).Elem()
			out.SetString(c)
			return out, true
		}
	case reflect.Pointer:
		if v.IsNil() {
			break
		}
		if elem, changed := cleanValue(v.Elem()); changed {
			out := reflect.New(v.Type().Elem())
			out.Elem().Set(elem)
			return out, true
		}
	case reflect.Interface:
		if v.IsNil() {
			break
		}
		if elem, changed := cleanValue(v.Elem()); changed {
			out := reflect.New(v.Type()).Elem()
			out.Set(elem)
			return out, true
		}
	case reflect.Struct:
		return cleanStruct(v, stringFields(v.Type()))
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() || !mayHoldStrings(v.Type().Elem()) {
			break
		}
		// A thousand rows of one type: its plan is looked up once.
		clean := cleanValue
		if v.Type().Elem().Kind() == reflect.Struct {
			fields := stringFields(v.Type().Elem())
			clean = func(v reflect.Value) (reflect.Value, bool) { return cleanStruct(v, fields) }
		}
		var out reflect.Value
		for i := range v.Len() {
			elem, changed := clean(v.Index(i))
			if !changed {
				continue
			}
			if !out.IsValid() {
				if v.Kind() == reflect.Slice {
					out = reflect.MakeSlice(v.Type(), v.Len(), v.Len())
					reflect.Copy(out, v)
				} else {
					out = reflect.New(v.Type()).Elem()
					out.Set(v)
				}
			}
			out.Index(i).Set(elem)
		}
		if out.IsValid() {
			return out, true
		}
	case reflect.Map:
		if v.IsNil() {
			break
		}
		changedAny := false
		iter := v.MapRange()
		for iter.Next() {
			_, kc := cleanValue(iter.Key())
			_, vc := cleanValue(iter.Value())
			if kc || vc {
				changedAny = true
				break
			}
		}
		if !changedAny {
			break
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		iter = v.MapRange()
		for iter.Next() {
			k, _ := cleanValue(iter.Key())
			e, _ := cleanValue(iter.Value())
			out.SetMapIndex(k, e)
		}
		return out, true
	}
	return v, false
}

// cleanStruct is cleanValue for a struct whose fields that may hold strings
// are fields.
func cleanStruct(v reflect.Value, fields []int) (reflect.Value, bool) {
	var out reflect.Value
	for _, i := range fields {
		f := v.Field(i)
		if f.Kind() == reflect.String && isClean(f.String()) {
			continue // most fields: nothing to do, nothing to call
		}
		field, changed := cleanValue(f)
		if !changed {
			continue
		}
		if !out.IsValid() {
			out = reflect.New(v.Type()).Elem()
			out.Set(v)
		}
		out.Field(i).Set(field)
	}
	if out.IsValid() {
		return out, true
	}
	return v, false
}

// CleanLines is Clean for text of several lines, such as an error listing
// reasons: each line is cleaned and the line breaks are kept.
func CleanLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Clean(l)
	}
	return strings.Join(lines, "\n")
}

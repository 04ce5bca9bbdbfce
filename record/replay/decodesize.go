package replay

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// A frame's JSON can cost far more memory decoded than it takes in the
// trace: each "{}" of a list of processes is a struct of some 400 bytes, so
// a frame inflating to the record format's 32 MiB could decode into
// gigabytes before any bound is applied to the sample. decodedBytes
// estimates, from the JSON and the sample's type, what json.Unmarshal would
// allocate, without decoding, so that such a frame is refused first.

// decodeFactor is how much a decoded sample may exceed its collector's
// share of the window before decoding it is refused: the window charges
// a sample its SizeBytes, which leaves out the fields a reading does not
// use (a GPU's unmeasured values), about half of its structs. A larger
// sample could not be held after its bounds anyway, unless cutting it to
// the live bounds would shrink it: that one is refused rather than cut,
// since decoding it is what would cost the memory.
const decodeFactor = 4

// decodedBytes estimates the bytes json.Unmarshal allocates decoding data,
// valid JSON, into a value of type t (a pointer to the sample), giving up
// once the estimate passes limit.
func decodedBytes(data []byte, t reflect.Type, limit int) int {
	z := sizer{b: data, limit: limit}
	z.value(t, known)
	return z.bytes
}

// How a value's type is known while scanning.
type mode int

const (
	known   mode = iota // decoded into its type
	ignored             // a member the type does not have: json skips it
	opaque              // decoded by an UnmarshalJSON: counted generously
)

// opaqueEntry is what a member or element of an opaque value is charged: a
// map entry's key, value and bucket share, as the custom decoders of the
// samples build (a map of names to values).
const opaqueEntry = 48

type sizer struct {
	b     []byte
	i     int
	bytes int
	limit int
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

func (z *sizer) over() bool { return z.bytes > z.limit }

func (z *sizer) skipSpace() {
	for z.i < len(z.b) && (z.b[z.i] == ' ' || z.b[z.i] == '\t' || z.b[z.i] == '\n' || z.b[z.i] == '\r') {
		z.i++
	}
}

// value scans one JSON value into type t.
func (z *sizer) value(t reflect.Type, m mode) {
	z.skipSpace()
	if z.i >= len(z.b) || z.over() {
		z.i = len(z.b)
		return
	}
	if m == known {
		for t.Kind() == reflect.Pointer {
			if z.b[z.i] == 'n' { // null: nothing allocated
				z.literal()
				return
			}
			t = t.Elem()
			z.bytes += int(t.Size())
		}
		if t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshaler) {
			m = opaque
		}
	}
	switch z.b[z.i] {
	case '{':
		z.object(t, m)
	case '[':
		z.array(t, m)
	case '"':
		n := z.str()
		if m != ignored {
			z.bytes += n
		}
	default:
		start := z.i
		z.literal()
		if z.i == start {
			z.i++ // not JSON (the reader passes only JSON): still move on
		}
	}
}

// object scans a JSON object into a struct, a map, or nothing.
func (z *sizer) object(t reflect.Type, m mode) {
	z.i++ // {
	var fields map[string]reflect.Type
	var elem reflect.Type
	if m == known {
		switch t.Kind() {
		case reflect.Struct:
			fields = jsonFields(t)
		case reflect.Map:
			elem = t.Elem()
		default:
			m = ignored // a type mismatch: json.Unmarshal refuses it
		}
	}
	for {
		z.skipSpace()
		if z.i >= len(z.b) || z.b[z.i] == '}' || z.over() {
			z.i++
			return
		}
		if z.b[z.i] == ',' {
			z.i++
			continue
		}
		start := z.i
		n := z.str()
		key := string(z.b[start+1 : start+1+n])
		z.skipSpace()
		z.i++ // :
		switch {
		case m == opaque:
			z.bytes += opaqueEntry + n
			z.value(nil, opaque)
		case m == ignored:
			z.value(nil, ignored)
		case fields != nil:
			ft, ok := fields[key]
			if !ok {
				ft, ok = fields[strings.ToLower(key)]
			}
			if !ok {
				z.value(nil, ignored)
				continue
			}
			z.value(ft, known)
		default: // a map
			z.bytes += opaqueEntry + n + int(elem.Size())
			z.value(elem, known)
		}
	}
}

// sliceCharge is what a decoded slice is charged per element, in elements:
// json.Unmarshal appends one element at a time, and append grows a long
// slice by a quarter, so the backing arrays it allocates on the way add up
// to about five times the last one's length (each is garbage only once the
// next is made).
const sliceCharge = 5

// array scans a JSON array into a slice (charged sliceCharge elements per
// element), an array, or nothing.
func (z *sizer) array(t reflect.Type, m mode) {
	z.i++ // [
	var elem reflect.Type
	slice := false
	if m == known {
		switch t.Kind() {
		case reflect.Slice:
			elem, slice = t.Elem(), true
		case reflect.Array:
			elem = t.Elem()
		default:
			m = ignored
		}
	}
	for {
		z.skipSpace()
		if z.i >= len(z.b) || z.b[z.i] == ']' || z.over() {
			z.i++
			return
		}
		if z.b[z.i] == ',' {
			z.i++
			continue
		}
		switch {
		case m == opaque:
			z.bytes += opaqueEntry
		case slice:
			z.bytes += sliceCharge * int(elem.Size())
		}
		z.value(elem, m)
	}
}

// str scans a string and returns the length of its contents as written.
func (z *sizer) str() int {
	start := z.i + 1
	for z.i++; z.i < len(z.b); z.i++ {
		switch z.b[z.i] {
		case '\\':
			z.i++
		case '"':
			z.i++
			return z.i - 1 - start
		}
	}
	return z.i - start
}

// literal scans a number, true, false or null.
func (z *sizer) literal() {
	for z.i < len(z.b) {
		switch z.b[z.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return
		}
		z.i++
	}
}

// jsonFieldsCache holds each struct type's fields by their JSON names (and
// those lowered, for json's case-insensitive match).
var jsonFieldsCache sync.Map // reflect.Type → map[string]reflect.Type

func jsonFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := jsonFieldsCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = f.Type
		if _, taken := out[strings.ToLower(name)]; !taken {
			out[strings.ToLower(name)] = f.Type
		}
	}
	jsonFieldsCache.Store(t, out)
	return out
}

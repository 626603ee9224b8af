package wire

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestParseCount(t *testing.T) {
	tests := []struct {
		name string
		body string
		want int
		err  string
	}{
		{"empty", "", 1, ""},
		{"spaces", " \n", 1, ""},
		{"one", "1", 1, ""},
		{"max", "10000", 10000, ""},
		{"padded", " 42\r\n", 42, ""},
		{"zero", "0", 0, "out of range"},
		{"over", "10001", 0, "out of range"},
		{"negative", "-1", 0, "not a number"},
		{"plus", "+5", 0, "not a number"},
		{"hex", "0x10", 0, "not a number"},
		{"float", "1.5", 0, "not a number"},
		{"overflow", "99999999999999999999999", 0, "not a number"},
		{"inner space", "1 2", 0, "not a number"},
		{"binary", "\x00\xff", 0, "not a number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCount([]byte(tc.body), DefaultMaxBatch)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseCount(%q) = %d, %v; want error containing %q", tc.body, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseCount(%q) = %d, %v; want %d", tc.body, got, err, tc.want)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	ids := []int64{1, 2, 1<<63 - 1, 1234567890123}
	for _, bin := range []bool{false, true} {
		var b []byte
		if bin {
			b = AppendBinary(nil, ids)
		} else {
			b = AppendDecimal(nil, ids)
		}
		got, err := DecodeIDs(nil, b, bin)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ids) {
			t.Fatalf("binary=%v: got %v want %v", bin, got, ids)
		}
		for i := range ids {
			if got[i] != ids[i] {
				t.Fatalf("binary=%v: got %v want %v", bin, got, ids)
			}
		}
	}
	if s := string(AppendDecimal(nil, []int64{7, 8})); s != "7\n8" {
		t.Fatalf("decimal = %q", s)
	}
}

func TestDecodeBad(t *testing.T) {
	for _, tc := range []struct {
		data string
		bin  bool
	}{{"", false}, {"", true}, {"1\n\n2", false}, {"abc", false}, {"1234567", true}} {
		if _, err := DecodeIDs(nil, []byte(tc.data), tc.bin); !errors.Is(err, ErrBadReply) {
			t.Errorf("DecodeIDs(%q, %v) = %v, want ErrBadReply", tc.data, tc.bin, err)
		}
	}
}

func TestReplyError(t *testing.T) {
	msg := &nats.Msg{Header: nats.Header{}}
	if ReplyError(msg) != nil {
		t.Fatal("no code must be no error")
	}
	for code, want := range map[string]error{"400": ErrBadRequest, "404": ErrUnknownTag, "503": ErrUnavailable, "500": ErrInternal} {
		msg.Header.Set(ErrorCodeHeader, code)
		msg.Header.Set(ErrorHeader, "boom")
		err := ReplyError(msg)
		if !errors.Is(err, want) || !strings.Contains(err.Error(), "boom") {
			t.Errorf("code %s: %v, want %v", code, err, want)
		}
	}
}

func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"", "1", "10000", "-1", "0x1", " 7 ", "99999999999999999999", "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := ParseCount(body, DefaultMaxBatch)
		if err == nil && (n < 1 || n > DefaultMaxBatch) {
			t.Fatalf("ParseCount(%q) = %d without error", body, n)
		}
	})
}

func FuzzDecodeIDs(f *testing.F) {
	f.Add([]byte("1\n2"), false)
	f.Add(AppendBinary(nil, []int64{1, 2}), true)
	f.Fuzz(func(t *testing.T, data []byte, bin bool) {
		ids, err := DecodeIDs(nil, data, bin)
		if err != nil {
			return
		}
		var again []byte
		if bin {
			again = AppendBinary(nil, ids)
		} else {
			again = AppendDecimal(nil, ids)
		}
		back, err := DecodeIDs(nil, again, bin)
		if err != nil || len(back) != len(ids) {
			t.Fatalf("re-encoding %v failed: %v", ids, err)
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	ids := make([]int64, 1000)
	for i := range ids {
		ids[i] = 7_000_000_000_000 + int64(i)
	}
	buf := make([]byte, 0, 32<<10)
	b.Run("binary1000", func(b *testing.B) {
		for b.Loop() {
			buf = AppendBinary(buf[:0], ids)
		}
	})
	b.Run("decimal1000", func(b *testing.B) {
		for b.Loop() {
			buf = AppendDecimal(buf[:0], ids)
		}
	})
}

// AppendDecimal's consecutive-id shortcut must match plain formatting,
// across digit-count changes and at the edges of int64.
func TestAppendDecimalConsecutive(t *testing.T) {
	starts := []int64{0, 1, 7, 8, 9, 95, 998, 9_999_990, 1<<63 - 5, -3}
	for _, s := range starts {
		var ids []int64
		for i := int64(0); i < 12 && s+i >= s; i++ {
			ids = append(ids, s+i)
		}
		ids = append(ids, 42, 43, 1<<63-1, -(1 << 63)) // breaks in the run, and an overflowing "next"
		got := string(AppendDecimal([]byte("x"), ids))
		want := "x"
		for i, id := range ids {
			if i > 0 {
				want += "\n"
			}
			want += strconv.FormatInt(id, 10)
		}
		if got != want {
			t.Fatalf("start %d:\ngot  %q\nwant %q", s, got, want)
		}
	}
}

func FuzzAppendDecimal(f *testing.F) {
	f.Add(int64(99), uint8(5), int64(7))
	f.Add(int64(1<<63-3), uint8(5), int64(-1))
	f.Fuzz(func(t *testing.T, start int64, n uint8, extra int64) {
		ids := []int64{extra}
		for i := int64(0); i < int64(n) && start+i >= start; i++ {
			ids = append(ids, start+i)
		}
		var want []byte
		for i, id := range ids {
			if i > 0 {
				want = append(want, '\n')
			}
			want = strconv.AppendInt(want, id, 10)
		}
		if got := AppendDecimal(nil, ids); string(got) != string(want) {
			t.Fatalf("got %q want %q", got, want)
		}
	})
}

func TestNewRequest(t *testing.T) {
	m := NewRequest("leaf.segment.a", 1, false)
	if m.Subject != "leaf.segment.a" || len(m.Data) != 0 || WantsBinary(m.Header) {
		t.Fatalf("one id: %+v", m)
	}
	m = NewRequest("leaf.snowflake", 250, true)
	if n, err := ParseCount(m.Data, 1000); err != nil || n != 250 || !WantsBinary(m.Header) {
		t.Fatalf("250 binary: %+v (%d, %v)", m, n, err)
	}
}

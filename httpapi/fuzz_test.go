package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/httpapi"
)

// FuzzLeafHTTP sends any method, path and query to the handler: it never
// panics and never answers 500 (every bad input is a 4xx with a message),
// and an id answer is a plain decimal.
func FuzzLeafHTTP(f *testing.F) {
	for _, s := range [][2]string{
		{"GET", "/api/segment/get/demo"},
		{"POST", "/api/snowflake/get/x"},
		{"GET", "/api/segment/get/a.b"},
		{"GET", "/api/segment/get/"},
		{"GET", "/decodeSnowflakeId?snowflakeId=-1"},
		{"GET", "/decodeSnowflakeId?snowflakeId=99999999999999999999999"},
		{"TRACE", "/api/segment/get/demo"},
		{"GET", "/api/segment/get/%2e%2e"},
		{"GET", "/status.json?x=%zz"},
		{"BREW", "/readyz"},
	} {
		f.Add(s[0], s[1])
	}
	n := newNode(f, map[string]int{"demo": 1000})
	cfg := n.config()
	h, err := httpapi.New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, target string) {
		if method == "" || strings.ContainsAny(method, " \t\r\n()<>@,;:\\\"/[]?={}") || !strings.HasPrefix(target, "/") ||
			strings.ContainsAny(target, " \t\r\n#") {
			return // not something net/http would hand a handler
		}
		req, err := http.NewRequest(method, "http://leafd"+target, nil)
		if err != nil {
			return
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 && w.Code != http.StatusServiceUnavailable && w.Code != http.StatusNotImplemented {
			t.Fatalf("%s %s = %d %q", method, target, w.Code, w.Body.String())
		}
		if w.Code >= 400 && w.Body.Len() == 0 && method != http.MethodHead {
			t.Fatalf("%s %s = %d with no message", method, target, w.Code)
		}
	})
}

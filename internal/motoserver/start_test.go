package motoserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestAnswersOnlyMoto: a server that took moto_server's port before it
// could (a 404 of another HTTP server, or a 200 that is not moto's
// dashboard) is not taken for moto_server, so Start waits for moto_server
// to exit and tries another port instead of handing out that server.
func TestAnswersOnlyMoto(t *testing.T) {
	t.Parallel()
	client := &http.Client{Timeout: 10 * time.Second}
	for name, h := range map[string]http.HandlerFunc{
		"another server's 404": http.NotFound,
		"another server's 200": func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) },
	} {
		squatter := httptest.NewServer(h)
		s := &Server{Backend: squatter.URL}
		if s.answers(context.Background(), client) {
			t.Errorf("%s was taken for moto_server", name)
		}
		squatter.Close()
	}
	moto := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("<html><title>Moto</title></html>"))
	}))
	defer moto.Close()
	if s := (&Server{Backend: moto.URL}); !s.answers(context.Background(), client) {
		t.Error("moto_server's dashboard was not recognised")
	}
}

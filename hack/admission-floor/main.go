// Command admission-floor answers every request with an allowed AdmissionReview and does nothing else: beside
// hami-place and HAMi in bench/admission.py, what the machine, TLS, HTTP/1.1 and vegeta cost by themselves.
package main

import (
	"io"
	"log"
	"net/http"
	"os"
)

var allowed = []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"","allowed":true}}`)

func main() {
	if len(os.Args) != 4 {
		log.Fatal("usage: admission-floor ADDRESS CERT KEY")
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if _, err := w.Write(allowed); err != nil {
			log.Print(err)
		}
	})
	log.Fatal(http.ListenAndServeTLS(os.Args[1], os.Args[2], os.Args[3], nil))
}

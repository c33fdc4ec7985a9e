package server

import (
	"net/http"
	"strings"
)

// keepDotSegments sends a request whose path has a "." or ".." segment
// straight to admin, and every other request to next (the ServeMux).
// http.ServeMux answers such a path with a redirect to its cleaned form,
// which names another entity: "a/../b" is not "b". Busbar refuses those
// names for new entities (package names), but an earlier version created
// some, and the admin API must reach them by their own name to show,
// update or delete them, and refuse to create new ones with its own error.
func keepDotSegments(next, admin http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hasDotSegment(r.URL.Path) {
			admin.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func hasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

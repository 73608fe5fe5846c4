// Package accesstest is a fake access service (EmbedAdmits) driven by a small
// table of embeds and codes: for tests, and for "dispatcher dev-access" in local
// development. Nothing else may import it (a depguard rule says so): the
// dispatcher itself only ever talks to a real access service through
// internal/access.
package accesstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	accessv1 "github.com/standmeet/webhook-dispatcher/pkg/api/access/v1"

	"github.com/standmeet/webhook-dispatcher/internal/event"
)

// Reasons Server answers with, mirroring what the real access service
// says.
const (
	ReasonEmbedDeleted = "embed_deleted"
	ReasonRevoked      = "revoked"
	ReasonExpired      = "expired"
	ReasonOutOfScope   = "out_of_scope"
	ReasonUnpublished  = "unpublished"
	ReasonAdmitted     = "admitted"
)

// Embed is one embed in a Server's table.
type Embed struct {
	OwnerID string `json:"owner_id"`
	CodeID  string `json:"code_id"`
	Deleted bool   `json:"deleted,omitempty"`
}

// Code is one access code in a Server's table.
type Code struct {
	Revoked bool `json:"revoked,omitempty"`
	// ExpiresAt is when the code stops admitting; zero means never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// SubjectPrefixes are the subjects the code covers. Empty covers nothing:
	// like the real service, the fake fails closed.
	SubjectPrefixes []string `json:"subject_prefixes"`
	// AllowUnpublished lets the code see notes that are not (and were not)
	// published; otherwise a corpus.note.changed event needs data.published
	// or data.was_published.
	AllowUnpublished bool `json:"allow_unpublished,omitempty"`
}

// Table is a Server's whole state, as read from a JSON file by
// `dispatcher dev-access --config`.
type Table struct {
	Embeds map[string]Embed `json:"embeds"`
	Codes  map[string]Code  `json:"codes"`
}

// ReadTable decodes a Table from JSON, rejecting unknown fields so a
// typo in a development config does not silently change what is admitted.
func ReadTable(r io.Reader) (Table, error) {
	var table Table
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&table); err != nil {
		return Table{}, fmt.Errorf("access: fake table: %w", err)
	}
	for id, emb := range table.Embeds {
		if emb.OwnerID == "" || emb.CodeID == "" {
			return Table{}, fmt.Errorf("access: fake table: embed %q needs owner_id and code_id", id)
		}
	}
	return table, nil
}

// Server is an in-memory AccessServiceServer for tests and local
// development. Its table can be changed while it serves, which is how tests
// revoke a code between two events.
type Server struct {
	accessv1.UnimplementedAccessServiceServer

	mu     sync.Mutex
	embeds map[string]Embed
	codes  map[string]Code
	down   bool
	calls  int
	now    func() time.Time

	srv *grpc.Server
}

// NewServer returns a Server with an empty table.
func NewServer() *Server {
	f := &Server{
		embeds: map[string]Embed{},
		codes:  map[string]Code{},
		now:    time.Now,
	}
	f.srv = grpc.NewServer()
	accessv1.RegisterAccessServiceServer(f.srv, f)
	// Reflection lets grpcurl poke the development server.
	reflection.Register(f.srv)
	return f
}

// Load replaces the whole table.
func (f *Server) Load(table Table) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.embeds = maps.Clone(table.Embeds)
	f.codes = maps.Clone(table.Codes)
	if f.embeds == nil {
		f.embeds = map[string]Embed{}
	}
	if f.codes == nil {
		f.codes = map[string]Code{}
	}
}

// SetEmbed adds or replaces an embed.
func (f *Server) SetEmbed(embedID string, emb Embed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.embeds[embedID] = emb
}

// SetCode adds or replaces an access code.
func (f *Server) SetCode(codeID string, code Code) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes[codeID] = code
}

// RevokeCode marks a code revoked. An unknown code is added, revoked.
func (f *Server) RevokeCode(codeID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	code := f.codes[codeID]
	code.Revoked = true
	f.codes[codeID] = code
}

// DeleteEmbed marks an embed deleted.
func (f *Server) DeleteEmbed(embedID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	emb := f.embeds[embedID]
	emb.Deleted = true
	f.embeds[embedID] = emb
}

// SetDown makes every call fail with Unavailable while down is true.
func (f *Server) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// Calls returns how many EmbedAdmits calls the server has received, those
// refused while down included.
func (f *Server) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Serve serves gRPC on lis until Stop; like grpc.Server.Serve it returns nil
// after Stop.
func (f *Server) Serve(lis net.Listener) error {
	if err := f.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("access: fake server: %w", err)
	}
	return nil
}

// Stop closes the listeners and every connection at once.
func (f *Server) Stop() { f.srv.Stop() }

// EmbedAdmits implements accessv1.AccessServiceServer.
func (f *Server) EmbedAdmits(_ context.Context, req *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++

	if f.down {
		return nil, status.Error(codes.Unavailable, "fake access service is down")
	}
	switch {
	case req.GetOwnerId() == "":
		return nil, status.Error(codes.InvalidArgument, "owner_id is required")
	case req.GetEmbedId() == "":
		return nil, status.Error(codes.InvalidArgument, "embed_id is required")
	case !json.Valid([]byte(req.GetData())):
		return nil, status.Error(codes.InvalidArgument, "data is not JSON")
	}

	admits, reason := f.decide(req)
	return &accessv1.EmbedAdmitsResponse{Admits: admits, Reason: reason}, nil
}

// decide applies the table; f.mu is held.
func (f *Server) decide(req *accessv1.EmbedAdmitsRequest) (bool, string) {
	emb, ok := f.embeds[req.GetEmbedId()]
	// Another owner's embed is, to this owner, an embed that does not exist.
	if !ok || emb.Deleted || emb.OwnerID != req.GetOwnerId() {
		return false, ReasonEmbedDeleted
	}
	code, ok := f.codes[emb.CodeID]
	switch {
	case !ok || code.Revoked:
		return false, ReasonRevoked
	case !code.ExpiresAt.IsZero() && !f.now().Before(code.ExpiresAt):
		return false, ReasonExpired
	case !underAny(code.SubjectPrefixes, req.GetSubject()):
		return false, ReasonOutOfScope
	}
	if req.GetEventType() == event.TypeNoteChanged && !code.AllowUnpublished {
		var d struct {
			Published    *bool `json:"published"`
			WasPublished *bool `json:"was_published"`
		}
		_ = json.Unmarshal([]byte(req.GetData()), &d)
		if !isSet(d.Published) && !isSet(d.WasPublished) {
			return false, ReasonUnpublished
		}
	}
	return true, ReasonAdmitted
}

func underAny(prefixes []string, subject string) bool {
	for _, p := range prefixes {
		if p != "" && strings.HasPrefix(subject, p) {
			return true
		}
	}
	return false
}

func isSet(b *bool) bool { return b != nil && *b }

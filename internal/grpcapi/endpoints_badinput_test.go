package grpcapi

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// Bad input for the EndpointService: every field of every
// op with each class of wrong value (empty, too long, wrong format, invalid
// UTF-8, injection strings), a foreign owner, and wrong or missing tokens.
// Each case gets one exact status (InvalidArgument naming the field in the
// message and in a BadRequest detail; NotFound with the one not-found
// message; Unauthenticated / PermissionDenied) and writes nothing: the
// endpoints, the jobs and the events are byte for byte what they were, and
// no test event is published.

// injectionValues are hostile strings an admin form might carry. Refused,
// they are never echoed; accepted (only as free text), they are stored
// verbatim and never executed.
var injectionValues = []string{
	"'; DROP TABLE webhook_endpoints; --",
	"<script>alert(1)</script>",
	"../../etc/passwd",
	"%00",
}

// badFixture is one owner's endpoint with one discarded delivery, served
// over the wire behind the auth interceptor, plus the same service in
// process for what protobuf cannot marshal.
type badFixture struct {
	env *testEnv
	svc webhooksv1.EndpointServiceServer
	raw webhooksv1.EndpointServiceClient // no token of its own
	id  string
	// jobID is the endpoint's one (discarded) delivery, of event eventID.
	jobID   int64
	eventID string
}

func newBadFixture(t *testing.T) *badFixture {
	t.Helper()
	env := newTestEnv(t, endpoint.ServiceConfig{})
	id := env.create(t, ownerA, "*").GetEndpoint().GetId()
	eventID := env.insertEvent(t, ownerA, "code.issued")
	jobID := env.insertDelivery(t, id, eventID)
	env.finalize(t, jobID, "discarded", "HTTP 500")
	return &badFixture{
		env:     env,
		svc:     NewEndpointServer(endpoint.NewService(endpoint.ServiceConfig{}, env.db.Pool, env.river, env.keyring, env.publisher, nil), nil),
		raw:     webhooksv1.NewEndpointServiceClient(env.raw),
		id:      id,
		jobID:   jobID,
		eventID: eventID,
	}
}

// snapshot renders everything an op could write.
func (f *badFixture) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, f.env.db.Pool.QueryRow(t.Context(), `
SELECT concat_ws(E'\n--\n',
  (SELECT coalesce(string_agg(w::text, E'\n' ORDER BY w.id), '') FROM webhook_endpoints w),
  (SELECT coalesce(string_agg(concat_ws('|', j.id, j.state, j.attempt, j.max_attempts, j.scheduled_at, j.args), E'\n' ORDER BY j.id), '') FROM river_job j),
  (SELECT coalesce(string_agg(e.id, ',' ORDER BY e.id), '') FROM events e))`).Scan(&s))
	return s
}

// call sends req (one of the service's request messages) over the wire
// with the admin token, or to the service in process.
func (f *badFixture) call(ctx context.Context, inProcess bool, req proto.Message) error {
	c, s := f.env.client, f.svc
	var err error
	switch r := req.(type) {
	case *webhooksv1.ListEndpointsRequest:
		if inProcess {
			_, err = s.ListEndpoints(ctx, r)
		} else {
			_, err = c.ListEndpoints(ctx, r)
		}
	case *webhooksv1.GetEndpointRequest:
		if inProcess {
			_, err = s.GetEndpoint(ctx, r)
		} else {
			_, err = c.GetEndpoint(ctx, r)
		}
	case *webhooksv1.CreateEndpointRequest:
		if inProcess {
			_, err = s.CreateEndpoint(ctx, r)
		} else {
			_, err = c.CreateEndpoint(ctx, r)
		}
	case *webhooksv1.UpdateEndpointRequest:
		if inProcess {
			_, err = s.UpdateEndpoint(ctx, r)
		} else {
			_, err = c.UpdateEndpoint(ctx, r)
		}
	case *webhooksv1.DeleteEndpointRequest:
		if inProcess {
			_, err = s.DeleteEndpoint(ctx, r)
		} else {
			_, err = c.DeleteEndpoint(ctx, r)
		}
	case *webhooksv1.RotateSecretRequest:
		if inProcess {
			_, err = s.RotateSecret(ctx, r)
		} else {
			_, err = c.RotateSecret(ctx, r)
		}
	case *webhooksv1.SendTestRequest:
		if inProcess {
			_, err = s.SendTest(ctx, r)
		} else {
			_, err = c.SendTest(ctx, r)
		}
	case *webhooksv1.ListDeliveriesRequest:
		if inProcess {
			_, err = s.ListDeliveries(ctx, r)
		} else {
			_, err = c.ListDeliveries(ctx, r)
		}
	case *webhooksv1.RedeliverRequest:
		if inProcess {
			_, err = s.Redeliver(ctx, r)
		} else {
			_, err = c.Redeliver(ctx, r)
		}
	case *webhooksv1.GetDeliveryRequest:
		if inProcess {
			_, err = s.GetDelivery(ctx, r)
		} else {
			_, err = c.GetDelivery(ctx, r)
		}
	case *webhooksv1.ListEventsRequest:
		if inProcess {
			_, err = s.ListEvents(ctx, r)
		} else {
			_, err = c.ListEvents(ctx, r)
		}
	case *webhooksv1.GetEventRequest:
		if inProcess {
			_, err = s.GetEvent(ctx, r)
		} else {
			_, err = c.GetEvent(ctx, r)
		}
	case *webhooksv1.ListEventTypesRequest:
		if inProcess {
			_, err = s.ListEventTypes(ctx, r)
		} else {
			_, err = c.ListEventTypes(ctx, r)
		}
	default:
		panic("unknown request type")
	}
	return err
}

// endpointOp is one EndpointService op: a valid request for the fixture,
// and how to put a value into its owner and endpoint id fields.
type endpointOp struct {
	name    string
	valid   func(f *badFixture) proto.Message
	setOwn  func(m proto.Message, v string)
	setID   func(m proto.Message, v string) // nil: the op takes no endpoint id
	idField string
}

func fieldMask(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

func validCreate() *webhooksv1.CreateEndpointRequest {
	return &webhooksv1.CreateEndpointRequest{
		OwnerId:     ownerA,
		Url:         "https://receiver.example.com/hooks",
		Description: "bad-input base",
		EventTypes:  []string{"corpus.*"},
		EmbedId:     "emb_1",
	}
}

var endpointOps = []endpointOp{
	{
		name:   "ListEndpoints",
		valid:  func(*badFixture) proto.Message { return &webhooksv1.ListEndpointsRequest{OwnerId: ownerA} },
		setOwn: func(m proto.Message, v string) { m.(*webhooksv1.ListEndpointsRequest).OwnerId = v },
	},
	{
		name: "GetEndpoint",
		valid: func(f *badFixture) proto.Message {
			return &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: f.id}
		},
		setOwn:  func(m proto.Message, v string) { m.(*webhooksv1.GetEndpointRequest).OwnerId = v },
		setID:   func(m proto.Message, v string) { m.(*webhooksv1.GetEndpointRequest).EndpointId = v },
		idField: endpoint.FieldEndpointID,
	},
	{
		name:   "CreateEndpoint",
		valid:  func(*badFixture) proto.Message { return validCreate() },
		setOwn: func(m proto.Message, v string) { m.(*webhooksv1.CreateEndpointRequest).OwnerId = v },
	},
	{
		name: "UpdateEndpoint",
		valid: func(f *badFixture) proto.Message {
			return &webhooksv1.UpdateEndpointRequest{OwnerId: ownerA, EndpointId: f.id, UpdateMask: fieldMask("description", "enabled"), Description: "changed"}
		},
		setOwn:  func(m proto.Message, v string) { m.(*webhooksv1.UpdateEndpointRequest).OwnerId = v },
		setID:   func(m proto.Message, v string) { m.(*webhooksv1.UpdateEndpointRequest).EndpointId = v },
		idField: endpoint.FieldEndpointID,
	},
	{
		name: "DeleteEndpoint",
		valid: func(f *badFixture) proto.Message {
			return &webhooksv1.DeleteEndpointRequest{OwnerId: ownerA, EndpointId: f.id}
		},
		setOwn:  func(m proto.Message, v string) { m.(*webhooksv1.DeleteEndpointRequest).OwnerId = v },
		setID:   func(m proto.Message, v string) { m.(*webhooksv1.DeleteEndpointRequest).EndpointId = v },
		idField: endpoint.FieldEndpointID,
	},
	{
		name: "RotateSecret",
		valid: func(f *badFixture) proto.Message {
			return &webhooksv1.RotateSecretRequest{OwnerId: ownerA, EndpointId: f.id}
		},
		setOwn:  func(m proto.Message, v string) { m.(*webhooksv1.RotateSecretRequest).OwnerId = v },
		setID:   func(m proto.Message, v string) { m.(*webhooksv1.RotateSecretRequest).EndpointId = v },
		idField: endpoint.FieldEndpointID,
	},
	{
		name: "SendTest",
		valid: func(f *badFixture) proto.Message {
			return &webhooksv1.SendTestRequest{OwnerId: ownerA, EndpointId: f.id}
		},
		setOwn:  func(m proto.Message, v string) { m.(*webhooksv1.SendTestRequest).OwnerId = v },
		setID:   func(m proto.Message, v string) { m.(*webhooksv1.SendTestRequest).EndpointId = v },
		idField: endpoint.FieldEndpointID,
	},
	{
		name: "ListDeliveries",
		valid: func(f *badFixture) proto.Message {
			return &webhooksv1.ListDeliveriesRequest{OwnerId: ownerA, EndpointId: f.id}
		},
		setOwn:  func(m proto.Message, v string) { m.(*webhooksv1.ListDeliveriesRequest).OwnerId = v },
		setID:   func(m proto.Message, v string) { m.(*webhooksv1.ListDeliveriesRequest).EndpointId = v },
		idField: endpoint.FieldEndpointID,
	},
	{
		name: "Redeliver",
		valid: func(f *badFixture) proto.Message {
			return &webhooksv1.RedeliverRequest{OwnerId: ownerA, EndpointId: f.id}
		},
		setOwn:  func(m proto.Message, v string) { m.(*webhooksv1.RedeliverRequest).OwnerId = v },
		setID:   func(m proto.Message, v string) { m.(*webhooksv1.RedeliverRequest).EndpointId = v },
		idField: endpoint.FieldEndpointID,
	},
	{
		name: "GetDelivery",
		valid: func(f *badFixture) proto.Message {
			return &webhooksv1.GetDeliveryRequest{OwnerId: ownerA, DeliveryId: f.jobID}
		},
		setOwn: func(m proto.Message, v string) { m.(*webhooksv1.GetDeliveryRequest).OwnerId = v },
	},
	{
		name:   "ListEvents",
		valid:  func(*badFixture) proto.Message { return &webhooksv1.ListEventsRequest{OwnerId: ownerA} },
		setOwn: func(m proto.Message, v string) { m.(*webhooksv1.ListEventsRequest).OwnerId = v },
	},
	{
		name: "GetEvent",
		valid: func(f *badFixture) proto.Message {
			return &webhooksv1.GetEventRequest{OwnerId: ownerA, EventId: f.eventID}
		},
		setOwn: func(m proto.Message, v string) { m.(*webhooksv1.GetEventRequest).OwnerId = v },
	},
}

// badCase is one request and the one status it must get.
type badCase struct {
	name  string
	req   func(f *badFixture) proto.Message
	code  codes.Code
	field string // for InvalidArgument: the field named
	// inProcess: the value is invalid UTF-8, which protobuf refuses to
	// marshal; the case checks that refusal and then calls in process.
	inProcess bool
	// deliveryNotFound, eventNotFound: NotFound for a delivery or event id,
	// not an endpoint's.
	deliveryNotFound bool
	eventNotFound    bool
}

// edit returns a request builder: op's valid request changed by fn.
func edit[M proto.Message](op endpointOp, fn func(M)) func(f *badFixture) proto.Message {
	return func(f *badFixture) proto.Message {
		m := op.valid(f)
		fn(m.(M))
		return m
	}
}

func opNamed(name string) endpointOp {
	for _, op := range endpointOps {
		if op.name == name {
			return op
		}
	}
	panic("no op " + name)
}

func badEndpointCases() []badCase {
	var cases []badCase
	invalid := func(name, field string, req func(*badFixture) proto.Message) {
		cases = append(cases, badCase{name: name, req: req, code: codes.InvalidArgument, field: field})
	}
	invalidUTF8 := func(name, field string, req func(*badFixture) proto.Message) {
		cases = append(cases, badCase{name: name, req: req, code: codes.InvalidArgument, field: field, inProcess: true})
	}
	notFound := func(name string, inProcess bool, req func(*badFixture) proto.Message) {
		cases = append(cases, badCase{name: name, req: req, code: codes.NotFound, inProcess: inProcess})
	}

	// owner_id and the endpoint id, on every op that has them.
	for _, op := range endpointOps {
		owner := func(v string) func(*badFixture) proto.Message {
			return func(f *badFixture) proto.Message {
				m := op.valid(f)
				op.setOwn(m, v)
				return m
			}
		}
		invalid(op.name+"OwnerEmpty", endpoint.FieldOwnerID, owner(""))
		invalid(op.name+"OwnerTooLong", endpoint.FieldOwnerID, owner(strings.Repeat("o", endpoint.MaxOwnerIDLen+1)))
		invalid(op.name+"OwnerWithSpace", endpoint.FieldOwnerID, owner("owner a"))
		invalid(op.name+"OwnerNonASCII", endpoint.FieldOwnerID, owner("ownér"))
		invalid(op.name+"OwnerNUL", endpoint.FieldOwnerID, owner("owner\x00a"))
		invalid(op.name+"OwnerSQLInjection", endpoint.FieldOwnerID, owner(injectionValues[0]))
		invalidUTF8(op.name+"OwnerInvalidUTF8", endpoint.FieldOwnerID, owner("owner\xff"))
		// Another owner's endpoint looks exactly like a missing one.
		if op.setID == nil {
			continue
		}
		id := func(v string) func(*badFixture) proto.Message {
			return func(f *badFixture) proto.Message {
				m := op.valid(f)
				op.setID(m, v)
				return m
			}
		}
		invalid(op.name+"IDEmpty", op.idField, id(""))
		notFound(op.name+"ForeignOwner", false, owner(ownerB))
		notFound(op.name+"IDUnknown", false, id(uuid.NewString()))
		notFound(op.name+"IDUnknownUpperCase", false, id(strings.ToUpper(uuid.NewString())))
		// A malformed id cannot name anyone's endpoint: a bad argument, named.
		invalid(op.name+"IDNotUUID", op.idField, id("endpoint-1"))
		invalid(op.name+"IDBraced", op.idField, func(f *badFixture) proto.Message { return id("{" + f.id + "}")(f) })
		invalid(op.name+"IDURN", op.idField, func(f *badFixture) proto.Message { return id("urn:uuid:" + f.id)(f) })
		invalid(op.name+"IDNoHyphens", op.idField, func(f *badFixture) proto.Message { return id(strings.ReplaceAll(f.id, "-", ""))(f) })
		invalid(op.name+"IDSQLInjection", op.idField, func(f *badFixture) proto.Message { return id(f.id + injectionValues[0])(f) })
		invalid(op.name+"IDPathTraversal", op.idField, id(injectionValues[2]))
		invalidUTF8(op.name+"IDInvalidUTF8", op.idField, id("\xff"+strings.Repeat("0", 35)))
	}

	create := opNamed("CreateEndpoint")
	createWith := func(fn func(*webhooksv1.CreateEndpointRequest)) func(*badFixture) proto.Message {
		return edit(create, fn)
	}
	url := func(name, raw string) {
		invalid("CreateURL"+name, endpoint.FieldURL, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Url = raw }))
	}
	url("Empty", "")
	url("TooLong", "https://example.com/"+strings.Repeat("a", endpoint.MaxURLLen))
	url("NotAURL", "receiver example com")
	url("Relative", "/hooks")
	url("SchemeOnly", "https://")
	url("FTP", "ftp://example.com/hooks")
	url("Javascript", "javascript:alert(1)")
	url("Data", "data:text/html,<script>alert(1)</script>")
	url("File", "file:///etc/passwd")
	url("Gopher", "gopher://example.com/")
	url("Opaque", "https:example.com")
	url("BackslashHost", `https:\\example.com\hooks`)
	url("UserInfo", "https://user:pass@example.com/")
	url("UserOnly", "https://user@example.com/")
	url("Fragment", "https://example.com/hooks#frag")
	url("Space", "https://example.com/a b")
	url("Tab", "https://example.com/\thooks")
	url("CRLF", "https://example.com/\r\nHost: internal")
	url("DEL", "https://example.com/\x7f")
	url("BadPort", "https://example.com:99999/")
	url("NonNumericPort", "https://example.com:https/")
	url("BadEscape", "https://example.com/%zz")
	url("Loopback", "http://127.0.0.1/hooks")
	url("Localhost", "http://localhost/hooks")
	url("LocalhostSubdomain", "http://api.localhost./hooks")
	url("Metadata", "http://169.254.169.254/latest/meta-data/")
	url("Private", "https://192.168.1.10/hooks")
	url("Unspecified", "http://0.0.0.0/")
	url("LoopbackV6", "http://[::1]/")
	url("LinkLocalV6WithZone", "http://[fe80::1%25eth0]/")
	url("NAT64Metadata", "http://[64:ff9b::a9fe:a9fe]/")
	url("SQLInjection", "https://example.com/"+injectionValues[0])
	url("ScriptHost", "https://<script>alert(1)</script>/")
	url("QuoteInHost", `https://example.com"onmouseover="alert(1)/`)
	url("PathTraversal", injectionValues[2])
	url("PercentNUL", injectionValues[3])
	// Numeric IPv4 spellings that browsers and C resolvers read as an address:
	// refused at create and update whatever they spell, public ones too.
	numericHosts := []struct{ name, url string }{
		{"Decimal", "http://2130706433/hooks"},
		{"Hex", "http://0x7f000001/hooks"},
		{"Octal", "http://017700000001/hooks"},
		{"ShortDotted", "http://127.1/hooks"},
		{"LeadingZeroPart", "https://8.8.8.010/hooks"},
		{"HexPart", "https://8.8.0x8.8/hooks"},
		{"TrailingDot", "https://8.8.8.8./hooks"},
		{"PublicDecimal", "https://134744072/hooks"},
		{"PublicHex", "https://0x08080808:8443/hooks"},
	}
	for _, h := range numericHosts {
		url("NumericHost"+h.name, h.url)
		invalid("UpdateURLNumericHost"+h.name, endpoint.FieldURL, edit(opNamed("UpdateEndpoint"), func(r *webhooksv1.UpdateEndpointRequest) {
			r.UpdateMask, r.Url = fieldMask("url"), h.url
		}))
	}
	invalidUTF8("CreateURLInvalidUTF8", endpoint.FieldURL, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://example.com/\xff" }))

	invalid("CreateDescriptionTooLong", endpoint.FieldDescription, createWith(func(r *webhooksv1.CreateEndpointRequest) {
		r.Description = strings.Repeat("é", endpoint.MaxDescriptionLen+1)
	}))
	invalid("CreateDescriptionNUL", endpoint.FieldDescription, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Description = "a\x00b" }))
	invalid("CreateDescriptionEscape", endpoint.FieldDescription, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Description = "a\x1b[31mred" }))
	invalidUTF8("CreateDescriptionInvalidUTF8", endpoint.FieldDescription, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Description = "a\xc3" }))

	globs := func(name, field string, g ...string) {
		invalid("CreateEventTypes"+name, field, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.EventTypes = g }))
	}
	globs("None", endpoint.FieldEventTypes)
	globs("TooMany", endpoint.FieldEventTypes, strings.Split(strings.Repeat("*,", endpoint.MaxEventTypes+1), ",")[:endpoint.MaxEventTypes+1]...)
	globs("EmptyGlob", "event_types[1]", "*", "")
	globs("TooLongGlob", "event_types[0]", "corpus."+strings.Repeat("a", 200))
	globs("StarStar", "event_types[0]", "*.*")
	globs("InnerStar", "event_types[0]", "corpus.*.changed")
	globs("UpperCase", "event_types[0]", "Corpus.*")
	globs("UnknownType", "event_types[0]", "corpus.note.deleted")
	globs("Duplicate", "event_types[1]", "corpus.*", "corpus.*")
	globs("SQLInjection", "event_types[0]", injectionValues[0])
	globs("Script", "event_types[0]", injectionValues[1])
	invalidUTF8("CreateEventTypesInvalidUTF8", "event_types[0]", createWith(func(r *webhooksv1.CreateEndpointRequest) { r.EventTypes = []string{"corpus.\xff"} }))

	embed := func(name, v string) {
		invalid("CreateEmbed"+name, endpoint.FieldEmbedID, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.EmbedId = v }))
	}
	embed("TooLong", strings.Repeat("e", endpoint.MaxEmbedIDLen+1))
	embed("Slash", "emb/1")
	embed("SQLInjection", injectionValues[0])
	embed("Script", injectionValues[1])
	embed("PathTraversal", injectionValues[2])
	embed("PercentNUL", injectionValues[3])
	invalidUTF8("CreateEmbedInvalidUTF8", endpoint.FieldEmbedID, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.EmbedId = "emb\xff" }))

	update := opNamed("UpdateEndpoint")
	updateWith := func(fn func(*webhooksv1.UpdateEndpointRequest)) func(*badFixture) proto.Message {
		return edit(update, fn)
	}
	invalid("UpdateMaskMissing", endpoint.FieldUpdateMask, updateWith(func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = nil }))
	invalid("UpdateMaskEmpty", endpoint.FieldUpdateMask, updateWith(func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = fieldMask() }))
	invalid("UpdateMaskSecret", "update_mask.paths[0]", updateWith(func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = fieldMask("secret_enc") }))
	invalid("UpdateMaskOwner", "update_mask.paths[1]", updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.UpdateMask = fieldMask("description", "owner_id")
	}))
	invalid("UpdateMaskFailingSince", "update_mask.paths[0]", updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.UpdateMask = fieldMask("failing_since")
	}))
	invalid("UpdateMaskSQLInjection", "update_mask.paths[0]", updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.UpdateMask = fieldMask(injectionValues[0])
	}))
	invalid("UpdateMaskWildcard", "update_mask.paths[0]", updateWith(func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = fieldMask("*") }))
	invalidUTF8("UpdateMaskInvalidUTF8", "update_mask.paths[0]", updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.UpdateMask = fieldMask("url\xff")
	}))
	invalid("UpdateURLJavascript", endpoint.FieldURL, updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.UpdateMask = fieldMask("url")
		r.Url = "javascript:alert(1)"
	}))
	invalid("UpdateURLEmpty", endpoint.FieldURL, updateWith(func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = fieldMask("url") }))
	invalid("UpdateURLMetadata", endpoint.FieldURL, updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.UpdateMask = fieldMask("url", "enabled")
		r.Url = "http://169.254.169.254/"
	}))
	invalid("UpdateDescriptionTooLong", endpoint.FieldDescription, updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.Description = strings.Repeat("x", endpoint.MaxDescriptionLen+1)
	}))
	invalidUTF8("UpdateDescriptionInvalidUTF8", endpoint.FieldDescription, updateWith(func(r *webhooksv1.UpdateEndpointRequest) { r.Description = "\xff" }))
	invalid("UpdateEventTypesEmpty", endpoint.FieldEventTypes, updateWith(func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = fieldMask("event_types") }))
	invalid("UpdateEventTypesBadGlob", "event_types[0]", updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.UpdateMask = fieldMask("event_types")
		r.EventTypes = []string{"corpus*"}
	}))
	invalid("UpdateEmbedInjection", endpoint.FieldEmbedID, updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.UpdateMask = fieldMask("embed_id")
		r.EmbedId = injectionValues[0]
	}))
	// Every violation is named, and the valid path in the same mask does not
	// half-apply.
	cases = append(cases, badCase{name: "UpdateSeveralViolationsNothingApplied", code: codes.InvalidArgument, field: endpoint.FieldURL,
		req: updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
			r.UpdateMask = fieldMask("description", "url", "enabled")
			r.Url = "ftp://x"
		})})

	rotate := opNamed("RotateSecret")
	grace := func(name string, d *durationpb.Duration) {
		invalid("RotateGrace"+name, endpoint.FieldGracePeriod, edit(rotate, func(r *webhooksv1.RotateSecretRequest) { r.GracePeriod = d }))
	}
	grace("Negative", durationpb.New(-time.Second))
	grace("TooLong", durationpb.New(endpoint.MaxGracePeriod+time.Second))
	grace("Huge", &durationpb.Duration{Seconds: math.MaxInt64})
	grace("MixedSigns", &durationpb.Duration{Seconds: 60, Nanos: -1})
	grace("NanosOverflow", &durationpb.Duration{Seconds: 0, Nanos: 1_000_000_000})

	for _, op := range []endpointOp{opNamed("ListEndpoints"), opNamed("ListDeliveries")} {
		setPage := func(size int32, tok string) func(*badFixture) proto.Message {
			return func(f *badFixture) proto.Message {
				m := op.valid(f)
				switch r := m.(type) {
				case *webhooksv1.ListEndpointsRequest:
					r.PageSize, r.PageToken = size, tok
				case *webhooksv1.ListDeliveriesRequest:
					r.PageSize, r.PageToken = size, tok
				}
				return m
			}
		}
		otherTag := encodeDeliveriesToken(7)
		if op.name == "ListDeliveries" {
			otherTag = encodeToken("e1", strconv.FormatInt(time.Now().UnixMicro(), 10), uuid.NewString())
		}
		invalid(op.name+"PageSizeNegative", endpoint.FieldPageSize, setPage(-1, ""))
		invalid(op.name+"PageSizeMinInt", endpoint.FieldPageSize, setPage(math.MinInt32, ""))
		invalid(op.name+"PageSizeAboveMax", endpoint.FieldPageSize, setPage(endpoint.MaxPageSize+1, ""))
		invalid(op.name+"PageSizeMaxInt", endpoint.FieldPageSize, setPage(math.MaxInt32, ""))
		invalid(op.name+"PageTokenGarbage", endpoint.FieldPageToken, setPage(0, "not a token"))
		invalid(op.name+"PageTokenOtherOp", endpoint.FieldPageToken, setPage(0, otherTag))
		invalid(op.name+"PageTokenSQLInjection", endpoint.FieldPageToken, setPage(0, injectionValues[0]))
		invalid(op.name+"PageTokenPathTraversal", endpoint.FieldPageToken, setPage(0, injectionValues[2]))
		invalid(op.name+"PageTokenStdBase64", endpoint.FieldPageToken, setPage(0, "ZTF8MTIzfGFiYw=="))
		invalid(op.name+"PageTokenExtraPart", endpoint.FieldPageToken, setPage(0, encodeToken("e1", "1", uuid.NewString(), "x")))
		invalid(op.name+"PageTokenNotANumber", endpoint.FieldPageToken, setPage(0, encodeToken("d1", "1e3")))
		invalidUTF8(op.name+"PageTokenInvalidUTF8", endpoint.FieldPageToken, setPage(0, "\xff\xfe"))
	}
	invalid("ListDeliveriesPageTokenZeroID", endpoint.FieldPageToken, edit(opNamed("ListDeliveries"), func(r *webhooksv1.ListDeliveriesRequest) {
		r.PageToken = encodeToken("d1", "0")
	}))

	// Names and labels, on create, update and the list filter.
	invalid("CreateNameTooLong", endpoint.FieldName, createWith(func(r *webhooksv1.CreateEndpointRequest) {
		r.Name = strings.Repeat("é", endpoint.MaxNameLen+1)
	}))
	invalid("CreateNameNUL", endpoint.FieldName, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Name = "a\x00b" }))
	invalid("CreateNameNewline", endpoint.FieldName, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Name = "a\nb" }))
	invalidUTF8("CreateNameInvalidUTF8", endpoint.FieldName, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Name = "a\xc3" }))
	invalid("UpdateNameEscape", endpoint.FieldName, updateWith(func(r *webhooksv1.UpdateEndpointRequest) {
		r.UpdateMask, r.Name = fieldMask("name"), "a\x1b[31mred"
	}))
	tooMany := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m["k"+strconv.Itoa(i)] = "v"
		}
		return m
	}
	labels := func(name, field string, m map[string]string) {
		invalid("CreateLabels"+name, field, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Labels = m }))
		invalid("UpdateLabels"+name, field, updateWith(func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask, r.Labels = fieldMask("labels"), m }))
	}
	labels("TooMany", endpoint.FieldLabels, tooMany(endpoint.MaxLabels+1))
	labels("EmptyKey", `labels[""]`, map[string]string{"": "v"})
	labels("UpperCaseKey", `labels["Env"]`, map[string]string{"Env": "prod"})
	labels("KeyStartsWithDash", `labels["-env"]`, map[string]string{"-env": "prod"})
	labels("KeyWithSpace", `labels["my env"]`, map[string]string{"my env": "prod"})
	labels("KeyTooLong", `labels["`+strings.Repeat("k", endpoint.MaxLabelKeyLen)+`…"]`, map[string]string{strings.Repeat("k", endpoint.MaxLabelKeyLen+1): "v"})
	// A bad key is named (quoted, cut short), like a custom header's name:
	// it is what the owner typed as a key, never a value. (So the hostile
	// keys are checked in TestEndpointNameAndLabels, not here, where every
	// refusal must not echo the injection strings.)
	labels("ValueTooLong", `labels["env"]`, map[string]string{"env": strings.Repeat("v", endpoint.MaxLabelValueLen+1)})
	labels("ValueNUL", `labels["env"]`, map[string]string{"env": "pr\x00od"})
	labels("ValueNewline", `labels["env"]`, map[string]string{"env": "prod\nX-Injected: 1"})
	invalidUTF8("CreateLabelsValueInvalidUTF8", `labels["env"]`, createWith(func(r *webhooksv1.CreateEndpointRequest) { r.Labels = map[string]string{"env": "\xff"} }))
	listWithLabels := func(m map[string]string) func(*badFixture) proto.Message {
		return edit(opNamed("ListEndpoints"), func(r *webhooksv1.ListEndpointsRequest) { r.Labels = m })
	}
	invalid("ListEndpointsLabelsTooMany", endpoint.FieldLabels, listWithLabels(tooMany(endpoint.MaxLabelFilters+1)))
	invalid("ListEndpointsLabelsBadKey", `labels["Env"]`, listWithLabels(map[string]string{"Env": "prod"}))
	invalid("ListEndpointsLabelsBadValue", `labels["env"]`, listWithLabels(map[string]string{"env": "a\x00"}))

	// GetDelivery: a delivery id is a positive job id; another owner's (or
	// a job that is no delivery) is NotFound like a missing one.
	get := opNamed("GetDelivery")
	getWith := func(fn func(*webhooksv1.GetDeliveryRequest)) func(*badFixture) proto.Message { return edit(get, fn) }
	invalid("GetDeliveryIDZero", endpoint.FieldDeliveryID, getWith(func(r *webhooksv1.GetDeliveryRequest) { r.DeliveryId = 0 }))
	invalid("GetDeliveryIDNegative", endpoint.FieldDeliveryID, getWith(func(r *webhooksv1.GetDeliveryRequest) { r.DeliveryId = -1 }))
	invalid("GetDeliveryIDMinInt", endpoint.FieldDeliveryID, getWith(func(r *webhooksv1.GetDeliveryRequest) { r.DeliveryId = math.MinInt64 }))
	cases = append(cases,
		badCase{name: "GetDeliveryForeignOwner", code: codes.NotFound, deliveryNotFound: true,
			req: getWith(func(r *webhooksv1.GetDeliveryRequest) { r.OwnerId = ownerB })},
		badCase{name: "GetDeliveryIDUnknown", code: codes.NotFound, deliveryNotFound: true,
			req: getWith(func(r *webhooksv1.GetDeliveryRequest) { r.DeliveryId = math.MaxInt64 })})

	// ListDeliveries' filters.
	listWith := func(fn func(*webhooksv1.ListDeliveriesRequest)) func(*badFixture) proto.Message {
		return edit(opNamed("ListDeliveries"), fn)
	}
	invalid("ListDeliveriesStateUnspecified", "states[0]", listWith(func(r *webhooksv1.ListDeliveriesRequest) {
		r.States = []webhooksv1.DeliveryState{webhooksv1.DeliveryState_DELIVERY_STATE_UNSPECIFIED}
	}))
	invalid("ListDeliveriesStateUnknown", "states[1]", listWith(func(r *webhooksv1.ListDeliveriesRequest) {
		r.States = []webhooksv1.DeliveryState{webhooksv1.DeliveryState_DELIVERY_STATE_FAILED, 99}
	}))
	invalid("ListDeliveriesStatesTooMany", endpoint.FieldStates, listWith(func(r *webhooksv1.ListDeliveriesRequest) {
		for range endpoint.MaxStatesFilter + 1 {
			r.States = append(r.States, webhooksv1.DeliveryState_DELIVERY_STATE_FAILED)
		}
	}))
	for name, g := range map[string]string{"InnerStar": "corpus.*.changed", "Unknown": "corpus.note.deleted", "UpperCase": "Corpus.*", "SQLInjection": injectionValues[0], "Like": "corpus.%"} {
		invalid("ListDeliveriesEventType"+name, endpoint.FieldEventType, listWith(func(r *webhooksv1.ListDeliveriesRequest) { r.EventType = g }))
	}
	invalidUTF8("ListDeliveriesEventTypeInvalidUTF8", endpoint.FieldEventType, listWith(func(r *webhooksv1.ListDeliveriesRequest) { r.EventType = "corpus.\xff" }))
	invalid("ListDeliveriesCreatedAfterOutOfRange", endpoint.FieldCreatedAfter, listWith(func(r *webhooksv1.ListDeliveriesRequest) {
		r.CreatedAfter = &timestamppb.Timestamp{Seconds: math.MaxInt64}
	}))
	invalid("ListDeliveriesCreatedBeforeBadNanos", endpoint.FieldCreatedBefore, listWith(func(r *webhooksv1.ListDeliveriesRequest) {
		r.CreatedBefore = &timestamppb.Timestamp{Seconds: 1, Nanos: -1}
	}))
	invalid("ListDeliveriesEmptyRange", endpoint.FieldCreatedBefore, listWith(func(r *webhooksv1.ListDeliveriesRequest) {
		at := timestamppb.Now()
		r.CreatedAfter, r.CreatedBefore = at, at
	}))

	// ListEvents' filters and GetEvent's id.
	eventsWith := func(fn func(*webhooksv1.ListEventsRequest)) func(*badFixture) proto.Message {
		return edit(opNamed("ListEvents"), fn)
	}
	invalid("ListEventsPageSizeAboveMax", endpoint.FieldPageSize, eventsWith(func(r *webhooksv1.ListEventsRequest) { r.PageSize = endpoint.MaxPageSize + 1 }))
	invalid("ListEventsPageTokenGarbage", endpoint.FieldPageToken, eventsWith(func(r *webhooksv1.ListEventsRequest) { r.PageToken = "not a token" }))
	invalid("ListEventsPageTokenOtherOp", endpoint.FieldPageToken, eventsWith(func(r *webhooksv1.ListEventsRequest) { r.PageToken = encodeDeliveriesToken(7) }))
	invalid("ListEventsPageTokenBadID", endpoint.FieldPageToken, eventsWith(func(r *webhooksv1.ListEventsRequest) {
		r.PageToken = encodeToken("v1", "1", injectionValues[0])
	}))
	invalid("ListEventsTypeBadGlob", endpoint.FieldEventType, eventsWith(func(r *webhooksv1.ListEventsRequest) { r.EventType = "corpus*" }))
	invalid("ListEventsTypeSQLInjection", endpoint.FieldEventType, eventsWith(func(r *webhooksv1.ListEventsRequest) { r.EventType = injectionValues[0] }))
	invalid("ListEventsSubjectTooLong", endpoint.FieldSubjectPrefix, eventsWith(func(r *webhooksv1.ListEventsRequest) { r.SubjectPrefix = strings.Repeat("s", 1025) }))
	invalid("ListEventsSubjectNUL", endpoint.FieldSubjectPrefix, eventsWith(func(r *webhooksv1.ListEventsRequest) { r.SubjectPrefix = "wiki://\x00" }))
	invalidUTF8("ListEventsSubjectInvalidUTF8", endpoint.FieldSubjectPrefix, eventsWith(func(r *webhooksv1.ListEventsRequest) { r.SubjectPrefix = "wiki://\xff" }))
	invalid("ListEventsOccurredAfterOutOfRange", endpoint.FieldOccurredAfter, eventsWith(func(r *webhooksv1.ListEventsRequest) {
		r.OccurredAfter = &timestamppb.Timestamp{Seconds: math.MaxInt64}
	}))
	invalid("ListEventsEmptyRange", endpoint.FieldOccurredBefore, eventsWith(func(r *webhooksv1.ListEventsRequest) {
		at := timestamppb.Now()
		r.OccurredAfter, r.OccurredBefore = at, at
	}))
	getEventWith := func(fn func(*webhooksv1.GetEventRequest)) func(*badFixture) proto.Message {
		return edit(opNamed("GetEvent"), fn)
	}
	invalid("GetEventIDEmpty", endpoint.FieldEventID, getEventWith(func(r *webhooksv1.GetEventRequest) { r.EventId = "" }))
	invalid("GetEventIDTooLong", endpoint.FieldEventID, getEventWith(func(r *webhooksv1.GetEventRequest) { r.EventId = strings.Repeat("e", 129) }))
	invalid("GetEventIDSQLInjection", endpoint.FieldEventID, getEventWith(func(r *webhooksv1.GetEventRequest) { r.EventId = injectionValues[0] }))
	invalid("GetEventIDPathTraversal", endpoint.FieldEventID, getEventWith(func(r *webhooksv1.GetEventRequest) { r.EventId = injectionValues[2] }))
	invalidUTF8("GetEventIDInvalidUTF8", endpoint.FieldEventID, getEventWith(func(r *webhooksv1.GetEventRequest) { r.EventId = "\xff" }))
	cases = append(cases,
		badCase{name: "GetEventForeignOwner", code: codes.NotFound, eventNotFound: true,
			req: getEventWith(func(r *webhooksv1.GetEventRequest) { r.OwnerId = ownerB })},
		badCase{name: "GetEventIDUnknown", code: codes.NotFound, eventNotFound: true,
			req: getEventWith(func(r *webhooksv1.GetEventRequest) { r.EventId = "no-such-event" })})

	// Redeliver's bounds.
	redeliverWith := func(fn func(*webhooksv1.RedeliverRequest)) func(*badFixture) proto.Message {
		return edit(opNamed("Redeliver"), fn)
	}
	since := time.Now().Add(-time.Hour)
	invalid("RedeliverLimitNegative", endpoint.FieldLimit, redeliverWith(func(r *webhooksv1.RedeliverRequest) { r.Limit = -1 }))
	invalid("RedeliverLimitAboveMax", endpoint.FieldLimit, redeliverWith(func(r *webhooksv1.RedeliverRequest) { r.Limit = endpoint.MaxRedeliverLimit + 1 }))
	invalid("RedeliverSinceOutOfRange", endpoint.FieldSince, redeliverWith(func(r *webhooksv1.RedeliverRequest) {
		r.Since = &timestamppb.Timestamp{Seconds: math.MinInt64}
	}))
	invalid("RedeliverPageTokenGarbage", endpoint.FieldPageToken, redeliverWith(func(r *webhooksv1.RedeliverRequest) { r.PageToken = "not a token" }))
	invalid("RedeliverPageTokenOtherOp", endpoint.FieldPageToken, redeliverWith(func(r *webhooksv1.RedeliverRequest) { r.PageToken = encodeDeliveriesToken(7) }))
	invalid("RedeliverPageTokenOtherSince", endpoint.FieldPageToken, redeliverWith(func(r *webhooksv1.RedeliverRequest) {
		r.Since = timestamppb.New(since)
		r.PageToken = encodeToken("r1", strconv.FormatInt(since.Add(-time.Second).UnixMicro(), 10), "7")
	}))
	invalid("RedeliverPageTokenSinceDropped", endpoint.FieldPageToken, redeliverWith(func(r *webhooksv1.RedeliverRequest) {
		r.PageToken = encodeToken("r1", strconv.FormatInt(since.UnixMicro(), 10), "7")
	}))
	invalid("RedeliverPageTokenZeroID", endpoint.FieldPageToken, redeliverWith(func(r *webhooksv1.RedeliverRequest) { r.PageToken = encodeToken("r1", "", "0") }))
	invalid("RedeliverPageTokenSQLInjection", endpoint.FieldPageToken, redeliverWith(func(r *webhooksv1.RedeliverRequest) {
		r.PageToken = encodeToken("r1", "", injectionValues[0])
	}))
	return cases
}

func TestEndpointBadInput(t *testing.T) {
	t.Parallel()

	// Every case runs against one fixture and must leave it untouched, so
	// each case also proves the others wrote nothing.
	f := newBadFixture(t)
	before := f.snapshot(t)

	cases := badEndpointCases()
	t.Logf("%d cases", len(cases))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := tc.req(f)
			if tc.inProcess {
				// Over the wire the client refuses to marshal it at all.
				werr := f.call(t.Context(), false, req)
				require.Equal(t, codes.Internal, status.Code(werr), "%v", werr)
				require.Contains(t, werr.Error(), "invalid UTF-8")
			}
			err := f.call(t.Context(), tc.inProcess, req)
			switch tc.code {
			case codes.InvalidArgument:
				requireField(t, err, tc.field)
			case codes.NotFound:
				switch {
				case tc.deliveryNotFound:
					requireDeliveryNotFound(t, err)
				case tc.eventNotFound:
					st := requireCode(t, err, codes.NotFound)
					require.Equal(t, EventNotFoundMessage, st.Message())
					require.Empty(t, st.Details())
				default:
					requireNotFound(t, err)
				}
			default:
				requireCode(t, err, tc.code)
			}
			msg := status.Convert(err).Message()
			for _, inj := range injectionValues {
				require.NotContains(t, msg, inj, "the refusal never echoes the value")
			}
			require.NotContains(t, msg, f.id, "the refusal never echoes the id")
			require.Equal(t, before, f.snapshot(t), "nothing written")
			require.Empty(t, f.env.publisher.published(), "no test event published")
		})
	}

	type authCase struct {
		name   string
		header string // the raw authorization value; "" sends none
		code   codes.Code
	}
	authCases := []authCase{
		{"NoToken", "", codes.Unauthenticated},
		{"WrongToken", "Bearer wrong-token-wrong-token", codes.Unauthenticated},
		{"PublisherToken", "Bearer " + testPublisherToken, codes.PermissionDenied},
		{"BasicScheme", "Basic " + testAdminToken, codes.Unauthenticated},
		{"EmptyBearer", "Bearer ", codes.Unauthenticated},
		{"TokenWithoutScheme", testAdminToken, codes.Unauthenticated},
		{"TruncatedToken", "Bearer " + testAdminToken[:len(testAdminToken)-1], codes.Unauthenticated},
		{"SQLInjectionToken", "Bearer " + injectionValues[0], codes.Unauthenticated},
	}
	ops := append(append([]endpointOp(nil), endpointOps...), endpointOp{
		name:  "ListEventTypes",
		valid: func(*badFixture) proto.Message { return &webhooksv1.ListEventTypesRequest{} },
	})
	for _, op := range ops {
		for _, ac := range authCases {
			t.Run(op.name+"Auth"+ac.name, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				if ac.header != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "authorization", ac.header)
				}
				err := invokeRaw(ctx, f.raw, op.valid(f))
				requireCode(t, err, ac.code)
				require.NotContains(t, status.Convert(err).Message(), testAdminToken)
				require.Equal(t, before, f.snapshot(t), "nothing written")
				require.Empty(t, f.env.publisher.published())
			})
		}
	}

	// A well-formed cursor forged with a time Postgres cannot represent is
	// no error: the page simply starts before everything or after
	// everything, and only ever holds the caller's own endpoints.
	for name, micros := range map[string]string{"MaxTime": "9223372036854775807", "MinTime": "-9223372036854775808"} {
		t.Run("ListEndpointsForgedCursor"+name, func(t *testing.T) {
			t.Parallel()
			resp, err := f.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{
				OwnerId: ownerA, PageToken: encodeToken("e1", micros, uuid.NewString()),
			})
			require.NoError(t, err)
			for _, ep := range resp.GetEndpoints() {
				require.Equal(t, ownerA, ep.GetOwnerId())
			}
			require.Equal(t, before, f.snapshot(t), "nothing written")
		})
	}

	// A client that is not Go's can put invalid UTF-8 on the wire: gRPC
	// refuses it before the service runs, as InvalidArgument (the Gate's
	// codec: grpc-go alone answers Internal for a request it cannot
	// unmarshal).
	t.Run("InvalidUTF8OnTheWire", func(t *testing.T) {
		t.Parallel()
		var body []byte
		body = protowire.AppendTag(body, 1, protowire.BytesType) // owner_id
		body = protowire.AppendString(body, ownerA)
		body = protowire.AppendTag(body, 2, protowire.BytesType) // url
		body = protowire.AppendString(body, "https://example.com/\xff")
		body = protowire.AppendTag(body, 4, protowire.BytesType) // event_types
		body = protowire.AppendString(body, "*")
		var resp webhooksv1.CreateEndpointResponse
		err := f.env.raw.Invoke(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+testAdminToken),
			webhooksv1.EndpointService_CreateEndpoint_FullMethodName, rawMessage(body), &resp, grpc.ForceCodec(rawCodec{}))
		requireCode(t, err, codes.InvalidArgument) // the client's error: retrying cannot help
		require.Contains(t, err.Error(), "invalid UTF-8")
		require.Equal(t, before, f.snapshot(t), "nothing written")
	})
}

// invokeRaw calls req's op on a client that adds no token of its own.
func invokeRaw(ctx context.Context, c webhooksv1.EndpointServiceClient, req proto.Message) error {
	var err error
	switch r := req.(type) {
	case *webhooksv1.ListEndpointsRequest:
		_, err = c.ListEndpoints(ctx, r)
	case *webhooksv1.GetEndpointRequest:
		_, err = c.GetEndpoint(ctx, r)
	case *webhooksv1.CreateEndpointRequest:
		_, err = c.CreateEndpoint(ctx, r)
	case *webhooksv1.UpdateEndpointRequest:
		_, err = c.UpdateEndpoint(ctx, r)
	case *webhooksv1.DeleteEndpointRequest:
		_, err = c.DeleteEndpoint(ctx, r)
	case *webhooksv1.RotateSecretRequest:
		_, err = c.RotateSecret(ctx, r)
	case *webhooksv1.SendTestRequest:
		_, err = c.SendTest(ctx, r)
	case *webhooksv1.ListDeliveriesRequest:
		_, err = c.ListDeliveries(ctx, r)
	case *webhooksv1.RedeliverRequest:
		_, err = c.Redeliver(ctx, r)
	case *webhooksv1.GetDeliveryRequest:
		_, err = c.GetDelivery(ctx, r)
	case *webhooksv1.ListEventsRequest:
		_, err = c.ListEvents(ctx, r)
	case *webhooksv1.GetEventRequest:
		_, err = c.GetEvent(ctx, r)
	case *webhooksv1.ListEventTypesRequest:
		_, err = c.ListEventTypes(ctx, r)
	default:
		panic("unknown request type")
	}
	return err
}

// rawMessage is a request already encoded by hand; rawCodec sends it as is
// and decodes replies as protobuf.
type rawMessage []byte

type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(rawMessage); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}

func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }

func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

// TestEndpointInjectionStoredVerbatim: where a hostile string is legitimate
// free text (a description) or an opaque id (an owner id without spaces), it
// is stored and returned byte for byte, and never executed.
func TestEndpointInjectionStoredVerbatim(t *testing.T) {
	t.Parallel()

	env := newTestEnv(t, endpoint.ServiceConfig{})
	description := strings.Join(injectionValues, "\n") + "\n\"quoted\" \\ backslash"
	owner := "';DROP/**/TABLE/**/webhook_endpoints;--"
	created, err := env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
		OwnerId:     owner,
		Url:         "https://receiver.example.com/hooks?q=%27%3B%20DROP%20TABLE%20webhook_endpoints%3B--",
		Description: description,
		EventTypes:  []string{"*"},
	})
	require.NoError(t, err)
	require.Equal(t, description, created.GetEndpoint().GetDescription())

	got, err := env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: owner})
	require.NoError(t, err)
	require.Len(t, got.GetEndpoints(), 1)
	require.Equal(t, description, got.GetEndpoints()[0].GetDescription())
	require.Equal(t, owner, got.GetEndpoints()[0].GetOwnerId())

	// Still there, and the only row: nothing was executed.
	require.Equal(t, 1, env.countEndpoints(t))
	var stored string
	require.NoError(t, env.db.Pool.QueryRow(t.Context(), `SELECT description FROM webhook_endpoints WHERE owner_id = $1`, owner).Scan(&stored))
	require.Equal(t, description, stored)

	// The same owner id is another owner: owner_a sees nothing of it.
	other, err := env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA})
	require.NoError(t, err)
	require.Empty(t, other.GetEndpoints())
}

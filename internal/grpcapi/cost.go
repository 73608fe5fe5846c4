package grpcapi

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Measured costs of decoding a publish request's protobuf encoding
// (TestDecodedCost): each google.protobuf.Value, map entry or list in an
// event's data costs at most 95 bytes once decoded, a byte of string at
// most one. Rounded up.
const (
	costPerNode = 128
	costPerByte = 1
)

// CostPerElement is the measured cost of a JSON element (a value, an object
// member, an array element) once protojson has decoded it: at most 140
// bytes (TestDecodedCost), rounded up; a byte of string costs at most one.
const CostPerElement = 160

// JSONDecodedCost is what the HTTP face holds for a JSON body of n bytes
// holding the given number of JSON elements while it serves the call: the body, its protojson
// decoding, and its protobuf encoding for the in-process pipe (at most 18
// bytes an element, a member of an object, and the strings' bytes; 24
// reserved). The gRPC server's decoding of that encoding is the gate's
// reservation (publishCost).
func JSONDecodedCost(n, elements int) int64 {
	decoded := int64(elements)*CostPerElement + int64(n)
	encoded := int64(elements)*24 + int64(n)
	return int64(n) + decoded + encoded
}

// MaxDataWireBytes bounds one event's data in its protobuf encoding, checked
// before it is decoded: data is at most webhook.MaxDataBytes as compact
// JSON, and its encoding takes at most about 5.5 times as many bytes (a
// number in a list: 2 bytes of JSON, 11 encoded), so 8 times leaves room.
const MaxDataWireBytes = 8 * webhook.MaxDataBytes

// Field numbers the scan walks: webhooks.v1 and google.protobuf.Struct.
const (
	fieldBatchEvents   = 1 // PublishBatchRequest.events
	fieldPublishEvent  = 1 // PublishRequest.event
	fieldEventData     = 6 // Event.data (Struct)
	fieldStructFields  = 1 // Struct.fields (map entries)
	fieldEntryValue    = 2 // Struct.FieldsEntry.value
	fieldValueStruct   = 5 // Value.struct_value
	fieldValueList     = 6 // Value.list_value
	fieldListValues    = 1 // ListValue.values
	maxScanDepthOfData = 100
)

// publishCost scans a publish request's encoding without decoding it: it
// refuses an event whose data is over MaxDataWireBytes (naming the event)
// and returns what decoding the request will cost. batch: a
// PublishBatchRequest, else a PublishRequest. A malformed encoding costs
// what its length says; the decoder refuses it.
func publishCost(b []byte, batch bool) (int64, error) {
	nodes := 0
	index := 0
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType || (batch && num != fieldBatchEvents) || (!batch && num != fieldPublishEvent) {
			return nil
		}
		i := index
		index++
		return eachField(v, func(num protowire.Number, typ protowire.Type, data []byte) error {
			if num != fieldEventData || typ != protowire.BytesType {
				return nil
			}
			if len(data) > MaxDataWireBytes {
				field := "event.data"
				if batch {
					field = fmt.Sprintf("events[%d].data", i)
				}
				return fmt.Errorf("%s is %d bytes encoded: data is a small JSON object (at most %d bytes as compact JSON)", field, len(data), webhook.MaxDataBytes)
			}
			nodes += countStruct(data, 0)
			return nil
		})
	})
	return int64(nodes)*costPerNode + int64(len(b))*costPerByte, err
}

// countStruct counts the nodes of an encoded google.protobuf.Struct: its
// map entries and their values, and everything nested in them.
func countStruct(b []byte, depth int) int {
	if depth > maxScanDepthOfData {
		return 0
	}
	n := 0
	_ = eachField(b, func(num protowire.Number, typ protowire.Type, entry []byte) error {
		if num != fieldStructFields || typ != protowire.BytesType {
			return nil
		}
		n++
		return eachField(entry, func(num protowire.Number, typ protowire.Type, value []byte) error {
			if num == fieldEntryValue && typ == protowire.BytesType {
				n += countValue(value, depth+1)
			}
			return nil
		})
	})
	return n
}

// countValue counts an encoded google.protobuf.Value and what it nests.
func countValue(b []byte, depth int) int {
	if depth > maxScanDepthOfData {
		return 1
	}
	n := 1
	_ = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldValueStruct:
			n += countStruct(v, depth+1)
		case fieldValueList:
			_ = eachField(v, func(num protowire.Number, typ protowire.Type, item []byte) error {
				if num == fieldListValues && typ == protowire.BytesType {
					n += countValue(item, depth+1)
				}
				return nil
			})
		}
		return nil
	})
	return n
}

// eachField calls f with each field of an encoded message (v: a
// length-delimited field's bytes, nil for others); it stops at the first
// error of f, or quietly at malformed input.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil
		}
		b = b[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

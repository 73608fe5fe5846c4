package decision

import "testing"

// BenchmarkRecord is the fanout's own cost of the record per event: one Add
// per endpoint of the owner and the Encode, in the shapes of bench S1 (100
// endpoints, 10 delivered) and S7 (1 endpoint, delivered), and for an owner
// with 5,000 endpoints.
func BenchmarkRecord(b *testing.B) {
	for _, shape := range []struct {
		name                 string
		delivered, notSubbed int
	}{
		{"S1", 10, 90},
		{"S7", 1, 0},
		{"Owner5000", 50, 4950},
	} {
		eps := ids(shape.delivered + shape.notSubbed)
		b.Run(shape.name, func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				var rec Builder
				for _, id := range eps[:shape.delivered] {
					rec.Add(HandedOff, id)
				}
				for _, id := range eps[shape.delivered:] {
					rec.Add(NotSubscribed, id)
				}
				size = len(rec.Encode())
			}
			b.ReportMetric(float64(size), "B/record")
		})
	}
}

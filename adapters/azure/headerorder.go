package azure

// The service's order of canonicalized header names: a two-level,
// weight-based comparison of ASCII bytes, ported from azblob's Shared Key
// policy (internal/exported/shared_key_credential.go, MIT licensed), which
// reproduces the service's. At the first level a byte of weight 0 (such
// as '-' or '\'') is skipped and letters weigh the same in either case; a
// tie goes to the second level, where only those skipped bytes ('\'' and
// '-') weigh, and a name whose skipped byte comes earlier sorts later.

// headerWeights0 is the first level's weight of each ASCII byte.
var headerWeights0 = [128]uint16{
	0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
	0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
	0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x71c, 0x0, 0x71f, 0x721, 0x723, 0x725,
	0x0, 0x0, 0x0, 0x72d, 0x803, 0x0, 0x0, 0x733, 0x0, 0xd03, 0xd1a, 0xd1c, 0xd1e,
	0xd20, 0xd22, 0xd24, 0xd26, 0xd28, 0xd2a, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
	0xe02, 0xe09, 0xe0a, 0xe1a, 0xe21, 0xe23, 0xe25, 0xe2c, 0xe32, 0xe35, 0xe36, 0xe48, 0xe51,
	0xe70, 0xe7c, 0xe7e, 0xe89, 0xe8a, 0xe91, 0xe99, 0xe9f, 0xea2, 0xea4, 0xea6, 0xea7, 0xea9,
	0x0, 0x0, 0x0, 0x743, 0x744, 0x748, 0xe02, 0xe09, 0xe0a, 0xe1a, 0xe21, 0xe23, 0xe25,
	0xe2c, 0xe32, 0xe35, 0xe36, 0xe48, 0xe51, 0xe70, 0xe7c, 0xe7e, 0xe89, 0xe8a, 0xe91, 0xe99,
	0xe9f, 0xea2, 0xea4, 0xea6, 0xea7, 0xea9, 0x0, 0x74c, 0x0, 0x750, 0x0,
}

// headerWeights2 is the second level's weight of each ASCII byte.
var headerWeights2 = [128]uint16{'\'': 0x8012, '-': 0x8212}

// headerWeight is b's weight at level (0 or 1); a byte beyond ASCII, which
// no header name holds, weighs 0 (skipped), where the SDK would panic.
func headerWeight(level int, b byte) uint16 {
	if b >= 128 {
		return 0
	}
	if level == 0 {
		return headerWeights0[b]
	}
	return headerWeights2[b]
}

// compareHeaders compares two lower-case header names in the service's
// order: negative if l sorts first, positive if r does, 0 if neither.
func compareHeaders(l, r string) int {
	const end = 1 // the weight past a name's last byte
	for level, i, j := 0, 0, 0; level < 2; {
		if level == 1 && i != j {
			// Mirrors the SDK: at the last level, positions that have
			// drifted apart decide by which name skipped further.
			if i > j {
				return -1
			}
			return 1
		}
		w1, w2 := uint16(end), uint16(end)
		if i < len(l) {
			w1 = headerWeight(level, l[i])
		}
		if j < len(r) {
			w2 = headerWeight(level, r[j])
		}
		switch {
		case w1 == end && w2 == end:
			level, i, j = level+1, 0, 0
		case w1 == w2:
			i++
			j++
		case w1 == 0:
			i++
		case w2 == 0:
			j++
		case w1 < w2:
			return -1
		default:
			return 1
		}
	}
	return 0
}

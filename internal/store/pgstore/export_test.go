package pgstore

// LoseAnswer makes s handle a commit whose answer was lost and could not
// be learned, as send does after ResolveWait (tests cannot cut a
// connection after its COMMIT went out without a proxy).
func LoseAnswer(s *Store, cause error) error { return s.unknown(0, s.marks.Load(), cause) }

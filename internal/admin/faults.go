package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/busbarmq/busbar/internal/faults"
)

// Fault injection and rule dry-runs: Busbar's own endpoints, beside the
// Service Bus API, under '$' names that no entity can have (names
// refuses '$'), with JSON bodies and the API's own authorisation
// (Manage) and <Error> answers:
//
//	/$faults            GET     {"rules": [rule…], "injected": {kind: n}}
//	                    POST    add the rule in the body (faults.Spec) → 201 rule
//	                    DELETE  clear every rule → {"cleared": n}
//	/$faults/{id}       DELETE  clear one rule → {"cleared": 1}, 404 if unknown
//	/$rules/dry-run     POST    {"topic": …, "message": {…}} → the verdict of
//	                            every subscription (dryrun.go)
//
// /$faults answers 404 unless the broker was started with fault
// injection on (--faults).

const contentTypeJSON = "application/json"

// maxJSONBytes bounds the JSON bodies these endpoints read.
const maxJSONBytes = 1 << 20

func (h *Handler) faultSet() (*faults.Set, error) {
	if h.faults == nil {
		return nil, errorf(http.StatusNotFound, "Fault injection is off: start the broker with --faults (BUSBAR_FAULTS=true) to use /$faults.")
	}
	return h.faults, nil
}

func jsonReply(status int, v any) (*reply, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &reply{status: status, contentType: contentTypeJSON, body: append(b, '\n')}, nil
}

// readJSON decodes the request body into v: one JSON value, unknown
// fields refused, at most maxJSONBytes.
func readJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxJSONBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "The request body is larger than %d bytes.", maxJSONBytes)
		}
		return badRequest("The request body could not be read: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return badRequest("The request body is not the JSON expected: %v", err)
	}
	if dec.More() {
		return badRequest("The request body holds more than one JSON value.")
	}
	return nil
}

// faultList is GET /$faults.
type faultList struct {
	Rules    []faults.Rule       `json:"rules"`
	Injected map[faults.Kind]int `json:"injected"`
}

func listFaults(h *Handler, _ *request) (*reply, error) {
	s, err := h.faultSet()
	if err != nil {
		return nil, err
	}
	rules := s.List()
	if rules == nil {
		rules = []faults.Rule{}
	}
	return jsonReply(http.StatusOK, faultList{Rules: rules, Injected: s.Injected()})
}

func addFault(h *Handler, rq *request) (*reply, error) {
	s, err := h.faultSet()
	if err != nil {
		return nil, err
	}
	var sp faults.Spec
	if err := readJSON(rq.r, &sp); err != nil {
		return nil, err
	}
	r, err := s.Add(sp)
	if err != nil {
		if faults.IsValidation(err) {
			return nil, badRequest("Invalid fault rule: %v.", err)
		}
		return nil, err
	}
	return jsonReply(http.StatusCreated, r)
}

func clearFaults(h *Handler, rq *request) (*reply, error) {
	s, err := h.faultSet()
	if err != nil {
		return nil, err
	}
	n := s.Clear(rq.res.entity)
	if rq.res.entity != "" && n == 0 {
		return nil, errorf(http.StatusNotFound, "There is no fault rule '%s' (it may have fired its last fault or expired).", rq.res.entity)
	}
	return jsonReply(http.StatusOK, map[string]int{"cleared": n})
}

package highwater

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Dispatcher is a highwater dispatcher's HTTP endpoint, for waiting without a database
// connection: GET {BaseURL}/v1/consumers/{consumer}/applied, a long poll.
type Dispatcher struct {
	// BaseURL is the dispatcher's --listen address, e.g. "http://highwater-dispatcher:8080".
	BaseURL string
	// AuthToken is a bearer token the dispatcher accepts: one of its SSE tokens
	// (HIGHWATER_SSE_TOKENS / --sse-tokens-file).
	AuthToken string
	// Client sends the request; nil means http.DefaultClient.
	Client *http.Client
}

// The dispatcher answers by its own deadline; ours is only a net in case it never does.
const httpGrace = 10 * time.Second

// maxBody bounds what is read of an answer: the dispatcher's are a few hundred bytes.
const maxBody = 1 << 20

// WaitApplied is the SQL WaitApplied through the dispatcher: 200 returns Applied true; 408
// Applied false with Pending (no error); 404 returns *UnknownConsumer; 400 (malformed token,
// token ahead of the database, timeout above 5 minutes), 401 (no or unknown bearer token) and
// 503 return *Error with Status and the dispatcher's reason.
func (d Dispatcher) WaitApplied(ctx context.Context, consumer string, token uint64, timeout time.Duration, opts ...WaitOption) (WaitResult, error) {
	u, err := d.appliedURL(consumer, token, timeout, collect(opts))
	if err != nil {
		return WaitResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+httpGrace)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return WaitResult{}, err
	}
	req.Header.Set("Authorization", "Bearer "+d.AuthToken)
	req.Header.Set("Accept", "application/json")
	client := d.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return WaitResult{}, err
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return WaitResult{}, err
	}
	return answer(resp.StatusCode, text, consumer)
}

func (d Dispatcher) appliedURL(consumer string, token uint64, timeout time.Duration, o waitOptions) (string, error) {
	base, err := url.Parse(strings.TrimSuffix(d.BaseURL, "/"))
	if err != nil {
		return "", fmt.Errorf("highwater: dispatcher URL %q: %w", d.BaseURL, err)
	}
	u := base.JoinPath("v1", "consumers", consumer, "applied")
	q := url.Values{}
	q.Set("after", FormatToken(token))
	q.Set("timeout", strconv.FormatInt(max(0, timeout.Round(time.Millisecond).Milliseconds()), 10)+"ms")
	if o.instance != "" {
		q.Set("instance", o.instance)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// answer reads the dispatcher's JSON answer ({"applied": …, "pending": …} or {"error": …}; a 401
// is plain text).
func answer(status int, text []byte, consumer string) (WaitResult, error) {
	var body struct {
		Applied bool            `json:"applied"`
		Pending json.RawMessage `json:"pending"`
		Error   string          `json:"error"`
	}
	reason := strings.TrimSpace(string(text))
	if json.Unmarshal(text, &body) == nil && body.Error != "" {
		reason = body.Error
	}
	if reason == "" {
		reason = http.StatusText(status)
	}
	switch status {
	case http.StatusOK:
		return WaitResult{Applied: body.Applied}, nil
	case http.StatusRequestTimeout:
		return WaitResult{Pending: body.Pending}, nil
	case http.StatusNotFound:
		return WaitResult{}, &UnknownConsumer{Consumer: consumer, Err: &Error{Message: reason, Status: status}}
	default:
		return WaitResult{}, &Error{Message: fmt.Sprintf("dispatcher answered %d: %s", status, reason), Status: status}
	}
}

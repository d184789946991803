package job

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Approval webhooks: when a call needs approval and the tenant's policy
// names a webhook, sandboxd POSTs
//
//	{"type": "approval.created", "approval": {...}}
//
// with the headers X-Sandboxd-Event, X-Sandboxd-Timestamp (Unix seconds) and
// X-Sandboxd-Signature: "sha256=" + hex(HMAC-SHA256(secret, timestamp + "." +
// body)). A receiver recomputes the signature, compares in constant time and
// rejects stale timestamps (replays). Delivery is retried with backoff on
// transport errors and non-2xx answers.

// WebhookSignature returns the X-Sandboxd-Signature value of body sent at ts.
func WebhookSignature(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// webhookAttempts is how many times a delivery is tried.
const webhookAttempts = 4

func (s *Service) notifyApproval(a *Approval) {
	p, ok := s.cfg.Policies[a.Tenant]
	if !ok || p.Approvals.Webhook == nil || p.Approvals.Webhook.URL == "" {
		return
	}
	url, secret := p.Approvals.Webhook.URL, []byte(p.Approvals.Webhook.Secret)
	body, err := json.Marshal(struct {
		Type     string    `json:"type"`
		Approval *Approval `json:"approval"`
	}{"approval.created", a})
	if err != nil {
		s.log.Error("encode approval webhook", "approval", a.ID, "err", err)
		return
	}
	s.hooks.Go(func() {
		backoff := s.cfg.WebhookBackoff
		for attempt := 1; ; attempt++ {
			err := s.deliver(url, secret, body)
			if err == nil {
				s.m.webhooks.WithLabelValues("delivered").Inc()
				return
			}
			if attempt == webhookAttempts {
				s.m.webhooks.WithLabelValues("failed").Inc()
				s.log.Warn("approval webhook failed", "approval", a.ID, "attempts", attempt, "err", err)
				return
			}
			select {
			case <-s.quit:
				s.m.webhooks.WithLabelValues("failed").Inc()
				return
			case <-time.After(backoff):
			}
			backoff *= 2
		}
	})
}

func (s *Service) deliver(url string, secret, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandboxd-webhook")
	req.Header.Set("X-Sandboxd-Event", "approval.created")
	req.Header.Set("X-Sandboxd-Timestamp", ts)
	req.Header.Set("X-Sandboxd-Signature", WebhookSignature(secret, ts, body))
	resp, err := s.cfg.WebhookClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

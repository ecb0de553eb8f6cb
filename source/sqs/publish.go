package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Publisher sends events to a queue, the producer's side of the source
// (`settle submit --source sqs:…`). SQS gives every message a MessageId
// of its own; a standard queue deduplicates nothing, so settle decides by
// the business id. On a FIFO queue (a URL ending in .fifo) each message
// goes to the message group of its settlement_id (one settlement's events
// stay in order, others are not held behind them), with the deduplication
// id given.
type Publisher struct {
	api      API
	queueURL string
	fifo     bool
}

// NewPublisher returns a publisher to queueURL with api (nil: NewClient).
func NewPublisher(ctx context.Context, queueURL string, api API) (*Publisher, error) {
	if api == nil {
		c, err := NewClient(ctx, queueURL)
		if err != nil {
			return nil, err
		}
		api = c
	}
	return &Publisher{api: api, queueURL: queueURL, fifo: strings.HasSuffix(queueURL, ".fifo")}, nil
}

// Publish sends one message and returns its MessageId. dedupID is the
// deduplication id on a FIFO queue (empty: none) and ignored otherwise.
func (p *Publisher) Publish(ctx context.Context, body []byte, dedupID string) (string, error) {
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(p.queueURL), MessageBody: aws.String(string(body))}
	if p.fifo {
		in.MessageGroupId = aws.String(groupID(body))
		if dedupID != "" {
			in.MessageDeduplicationId = aws.String(dedupID)
		}
	}
	out, err := p.api.SendMessage(ctx, in)
	if err != nil {
		return "", fmt.Errorf("error sending to %s: %w", p.queueURL, err)
	}
	return aws.ToString(out.MessageId), nil
}

// PublishBatch sends up to 10 messages in one call and returns the
// MessageId of each, "" for one that failed (with the errors joined).
func (p *Publisher) PublishBatch(ctx context.Context, bodies [][]byte) ([]string, error) {
	if len(bodies) > MaxReceive {
		return nil, fmt.Errorf("error sending %d messages: at most %d per batch", len(bodies), MaxReceive)
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(bodies))
	for i, b := range bodies {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(b))}
		if p.fifo {
			entries[i].MessageGroupId = aws.String(groupID(b))
		}
	}
	out, err := p.api.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(p.queueURL), Entries: entries})
	if err != nil {
		return nil, fmt.Errorf("error sending %d messages to %s: %w", len(bodies), p.queueURL, err)
	}
	ids := make([]string, len(bodies))
	for _, ok := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(ok.Id)); err == nil && i >= 0 && i < len(ids) {
			ids[i] = aws.ToString(ok.MessageId)
		}
	}
	var errs []error
	for _, f := range out.Failed {
		errs = append(errs, fmt.Errorf("error sending message %s to %s: %s: %s", aws.ToString(f.Id), p.queueURL, aws.ToString(f.Code), aws.ToString(f.Message)))
	}
	return ids, errors.Join(errs...)
}

// groupID is the FIFO message group of an event: its settlement_id, or
// "settle" for a body that names none.
func groupID(body []byte) string {
	var ev struct {
		SettlementID string `json:"settlement_id"`
	}
	if json.Unmarshal(body, &ev) == nil && ev.SettlementID != "" && len(ev.SettlementID) <= 128 {
		return ev.SettlementID
	}
	return "settle"
}

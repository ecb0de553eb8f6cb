package reconcile

import (
	"context"

	"github.com/settle/settle/settlement"
)

// sourceKey is the context key of WithSource.
type sourceKey struct{}

// WithSource returns ctx saying who asks the Resolver: the transitions its
// decisions make under ctx record src as their source
// (settlement_transitions.source). Without it they record
// settlement.SourceWorker. The jobs, the console, settle reconcile and the
// statement import each say who they are.
func WithSource(ctx context.Context, src settlement.Source) context.Context {
	return context.WithValue(ctx, sourceKey{}, src)
}

// sourceOf is the source ctx names, or settlement.SourceWorker.
func sourceOf(ctx context.Context) settlement.Source {
	if src, ok := ctx.Value(sourceKey{}).(settlement.Source); ok && src != "" {
		return src
	}
	return settlement.SourceWorker
}

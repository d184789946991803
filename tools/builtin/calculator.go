package builtin

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

func calculatorTool() *tools.Tool {
	return &tools.Tool{
		Name: "calculator",
		Description: "Evaluate an arithmetic expression exactly, with Python's rules: + - * / (true division) // (floor division) % (sign of the divisor) ** (power, " +
			"right-associative, binds tighter than unary minus: -2**2 = -4), parentheses. Integers are exact and unbounded up to 20000 digits " +
			"(2**200, factorial(100)); a float anywhere makes the result a float. Functions: sqrt cbrt isqrt exp log(x[, base]) log2 log10 " +
			"sin cos tan asin acos atan atan2 sinh cosh tanh degrees radians hypot abs floor ceil trunc round(x[, ndigits]) int float " +
			"factorial (n <= 5000) gcd lcm min max pow(x, y[, mod]). Constants: pi e tau inf nan. Angles are in radians.",
		InputSchema: objectSchema(map[string]any{
			"expression": map[string]any{
				"type":        "string",
				"minLength":   1,
				"maxLength":   maxCalcInput,
				"description": "The expression, e.g. \"(2**64 - 1) // 3\" or \"sqrt(2) * sin(pi/4)\". No variables or assignments.",
			},
		}, "expression"),
		Effects:      nil,
		ParallelSafe: true,
		Run: func(_ context.Context, _ tools.Env, args map[string]any) (tools.Result, error) {
			start := time.Now()
			v, err := Calculate(argString(args, "expression", ""))
			if err != nil {
				return errResult(start, err.Error()), nil
			}
			return okResult(start, v), nil
		},
	}
}

// Calculate evaluates expr with the calculator tool's grammar and returns
// the result as the tool prints it. Errors are the tool's messages: syntax
// (with a 1-based position), unknown names, domain and size limits.
func Calculate(expr string) (string, error) {
	n, err := parseExpr(expr)
	if err != nil {
		return "", err
	}
	v, err := eval(n)
	if err != nil {
		return "", err
	}
	return v.format(), nil
}

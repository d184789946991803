package builtin

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/tools"
)

func TestCalculate(t *testing.T) {
	t.Parallel()
	tests := []struct{ expr, want string }{
		// precedence and associativity
		{"1 + 2 * 3", "7"},
		{"(1 + 2) * 3", "9"},
		{"2 ** 3 ** 2", "512"},
		{"-2 ** 2", "-4"},
		{"(-2) ** 2", "4"},
		{"2 ** -1", "0.5"},
		{"2 ** -2 ** 2", "0.0625"},
		{"-3 - -3", "0"},
		{"+-+5", "-5"},
		{"10 - 4 - 3", "3"},
		{"100 / 10 / 5", "2.0"},
		{"2 * 3 % 4", "2"},
		// Python division semantics
		{"10 / 4", "2.5"},
		{"4 / 2", "2.0"},
		{"7 // 2", "3"},
		{"-7 // 2", "-4"},
		{"7 // -2", "-4"},
		{"-7 % 3", "2"},
		{"7 % -3", "-2"},
		{"-7.5 // 2", "-4.0"},
		{"-7.5 % 2", "0.5"},
		{"7.5 % -2", "-0.5"},
		{"-1 // inf", "-1.0"},
		{"1 // inf", "0.0"},
		{"5 % inf", "5.0"},
		{"1 / 3", "0.3333333333333333"},
		{"10**30 / 10**29", "10.0"},
		// exact big integers
		{"2 ** 200", "1606938044258990275541962092341162602522202993782792835301376"},
		{"factorial(25)", "15511210043330985984000000"},
		{"2**64 - 1", "18446744073709551615"},
		{"(2**64) // 3", "6148914691236517205"},
		{"gcd(2**40, 6**20)", "1048576"},
		{"lcm(4, 6, 10)", "60"},
		{"gcd()", "0"},
		{"pow(3, 200, 1000)", "1"},
		{"pow(2, 10, -7)", "-5"},
		{"pow(2, 10)", "1024"},
		{"isqrt(10**40 + 1)", "100000000000000000000"},
		{"abs(-2**100)", "1267650600228229401496703205376"},
		{"0x1F + 0o17 + 0b11", "49"},
		{"1_000_000 * 3", "3000000"},
		{"007 - 0 + 00", ""}, // leading zeros: error, checked below
		// floats
		{"0.1 + 0.2", "0.30000000000000004"},
		{"1e3", "1000.0"},
		{"1e16", "1e+16"},
		{"1.5e-5", "1.5e-05"},
		{"123456789.0 * 10", "1234567890.0"},
		{"2 * 0.5", "1.0"},
		{".5 + 1.", "1.5"},
		{"-0.0", "-0.0"},
		{"1e308 * 10", ""}, // overflow: error
		{"sqrt(16)", "4.0"},
		{"sqrt(2)", "1.4142135623730951"},
		{"cbrt(27)", "3.0"},
		{"sin(0)", "0.0"},
		{"cos(pi)", "-1.0"},
		{"atan2(1, 1) * 4", "3.141592653589793"},
		{"exp(1) == e", ""},
		{"log(e)", "1.0"},
		{"log(8, 2)", "3.0"},
		{"log(100, 10)", "2.0"},
		{"log10(1000)", "3.0"},
		{"log2(1024)", "10.0"},
		{"log(2**2000)", "1386.2943611198907"},
		{"hypot(3, 4)", "5.0"},
		{"degrees(pi)", "180.0"},
		{"radians(180)", "3.141592653589793"},
		{"tau / 2", "3.141592653589793"},
		{"floor(-2.5)", "-3"},
		{"ceil(2.1)", "3"},
		{"trunc(-2.7)", "-2"},
		{"int(1e20)", "100000000000000000000"},
		{"float(2**53)", "9007199254740992.0"},
		{"round(2.5)", "2"},
		{"round(3.5)", "4"},
		{"round(-0.5)", "0"},
		{"round(2.675, 2)", "2.67"},
		{"round(1234.5, -2)", "1200.0"},
		{"round(1250, -2)", "1200"},
		{"round(1350, -2)", "1400"},
		{"round(-1250, -2)", "-1200"},
		{"round(5, 2)", "5"},
		{"round(2.5, 0)", "2.0"},
		{"min(3, 1.5, 2)", "1.5"},
		{"max(2**100, 1e30)", "1267650600228229401496703205376"},
		{"max(1, 1.0)", "1"},
		{"inf - 1", "inf"},
		{"-inf", "-inf"},
		{"abs(-1.5)", "1.5"},
		{"  2\t*\n3 ", "6"},
	}
	for _, tc := range tests {
		if tc.want == "" {
			continue
		}
		t.Run(tc.expr, func(t *testing.T) {
			t.Parallel()
			got, err := Calculate(tc.expr)
			if err != nil {
				t.Fatalf("error %v", err)
			}
			if got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestCalculateBig(t *testing.T) {
	t.Parallel()
	f, err := Calculate("factorial(100)")
	if err != nil || len(f) != 158 || !strings.HasPrefix(f, "93326215443944152681") || !strings.HasSuffix(f, strings.Repeat("0", 24)) {
		t.Errorf("100! = %s (%v)", f, err)
	}
	f, err = Calculate("factorial(5000)")
	if err != nil || len(f) != 16326 {
		t.Errorf("5000! has %d digits (%v)", len(f), err)
	}
	f, err = Calculate("10**19999")
	if err != nil || len(f) != 20000 {
		t.Errorf("10**19999: %d digits (%v)", len(f), err)
	}
}

func TestCalculateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ expr, want string }{
		{"", "empty expression"},
		{"1 / 0", "division by zero (at position 3)"},
		{"1 // 0", "division or modulo by zero"},
		{"5 % 0", "division or modulo by zero"},
		{"1.0 / 0", "division by zero"},
		{"2.5 % 0.0", "modulo by zero"},
		{"0 ** -1", "negative power"},
		{"foo + 1", "unknown name \"foo\" (constants"},
		{"foo(1)", "unknown function \"foo\""},
		{"pi(2)", "pi is a constant"},
		{"sqrt", "sqrt is a function"},
		{"sqrt(1, 2)", "sqrt() takes 1 argument(s), got 2"},
		{"log()", "log() takes 1 to 2 arguments, got 0"},
		{"max()", "at least 1 argument"},
		{"1 +", "expected a number, name or '(', found end of expression (at position 4)"},
		{"(1 + 2", "expected ')' to close '(' at position 1"},
		{"1 + 2)", "unexpected \")\" (at position 6)"},
		{"2 3", "unexpected \"3\""},
		{"2 ^ 3", "use ** for powers"},
		{"a = 1", "unexpected character '='"},
		{"__import__('os')", "unexpected character '\\''"},
		{"1..2", "unexpected"},
		{"f(1,)", "expected a number"},
		{"max(1 2)", "expected ',' or ')'"},
		{"010", "leading zeros"},
		{"1__0", "invalid number"},
		{"0x", "invalid number"},
		{"sqrt(-1)", "math domain error"},
		{"log(0)", "math domain error"},
		{"log(-2**2000)", "math domain error"},
		{"acos(2)", "math domain error"},
		{"(-8) ** (1/3)", "complex"},
		{"1e308 * 10", "out of range"},
		{"exp(1000)", "out of range"},
		{"10.0 ** 400", "out of range"},
		{"2 ** 100000", "too large"},
		{"10 ** 20000", "too large"},
		{"(2**60000) * (2**60000)", "too large"},
		{"2 ** (2 ** 100)", "too large"},
		{"factorial(5001)", "larger than 5000"},
		{"factorial(-1)", "negative"},
		{"factorial(2.0)", "only accepts integers"},
		{"gcd(1.5, 2)", "only accepts integers"},
		{"pow(2, 3, 0)", "cannot be 0"},
		{"pow(2.0, 3, 5)", "not allowed unless all arguments are integers"},
		{"pow(2, 2**5000, 7)", "limited to 4096-bit"},
		{"floor(inf)", "infinity"},
		{"int(nan)", "NaN"},
		{"float(2**2000)", "too large to convert to float"},
		{"2**2000 / 3", "too large for a float"},
		{"2**2000 + 0.5", "too large to convert"},
		{strings.Repeat("(", 101) + "1" + strings.Repeat(")", 101), "nested more than 100"},
		{strings.Repeat("-", 200) + "1", "nested more than 100"},
		{strings.Repeat("1+", 600) + "1", "more than the 1000 allowed"},
		{"1 + \xff", "invalid UTF-8"},
		{"1 × 2", "unexpected character '×' (at position 3)"},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			t.Parallel()
			got, err := Calculate(tc.expr)
			if err == nil {
				t.Fatalf("got %s, want error %q", got, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestCalculatorTool(t *testing.T) {
	t.Parallel()
	tl := toolByName(t, "calculator")
	r, err := tl.Run(t.Context(), tools.Env{}, map[string]any{"expression": "2**10"})
	if err != nil || !r.OK || r.Content != "1024" || len(r.Effects) != 0 {
		t.Errorf("%+v %v", r, err)
	}
	r, err = tl.Run(t.Context(), tools.Env{}, map[string]any{"expression": "1/0"})
	if err != nil || r.OK || !strings.Contains(r.Error, "division by zero") {
		t.Errorf("tool errors must be results: %+v %v", r, err)
	}
}

func FuzzCalculator(f *testing.F) {
	for _, s := range []string{
		"1 + 2 * 3", "-2**2", "2**3**2", "factorial(20)", "10/4", "-7 // 2", "-7.5 % 2",
		"sqrt(2)", "log(8, 2)", "round(2.675, 2)", "pow(3, 200, 1000)", "max(1, 2.5)",
		"(1 + (2 * (3 - 4)))", "0x10 + 0b1 + 0o7", "1e308 * 10", "2**-1", "gcd(12, 18)",
		"inf - inf", "nan", "1_000", "((((", "2 ^ 3", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		out, err := Calculate(expr)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if out == "" || !utf8.ValidString(out) || len(out) > maxIntDigits+1 {
			t.Fatalf("Calculate(%q) = %q", expr, out)
		}
	})
}

package builtin

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

var calcConstants = map[string]float64{
	"pi":  math.Pi,
	"e":   math.E,
	"tau": 2 * math.Pi,
	"inf": math.Inf(1),
	"nan": math.NaN(),
}

type calcFunc struct {
	minArgs, maxArgs int // maxArgs -1: any number
	fn               func(args []value) (value, error)
}

var calcFuncs map[string]calcFunc

func init() {
	f1 := func(name string, g func(float64) float64) calcFunc {
		return calcFunc{1, 1, func(a []value) (value, error) {
			x, err := a[0].float()
			if err != nil {
				return value{}, err
			}
			return checkFloat(g(x), name, x)
		}}
	}
	calcFuncs = map[string]calcFunc{
		"sqrt":    f1("sqrt", math.Sqrt),
		"cbrt":    f1("cbrt", math.Cbrt),
		"sin":     f1("sin", math.Sin),
		"cos":     f1("cos", math.Cos),
		"tan":     f1("tan", math.Tan),
		"asin":    f1("asin", math.Asin),
		"acos":    f1("acos", math.Acos),
		"atan":    f1("atan", math.Atan),
		"sinh":    f1("sinh", math.Sinh),
		"cosh":    f1("cosh", math.Cosh),
		"tanh":    f1("tanh", math.Tanh),
		"exp":     f1("exp", math.Exp),
		"degrees": f1("degrees", func(x float64) float64 { return x * 180 / math.Pi }),
		"radians": f1("radians", func(x float64) float64 { return x * math.Pi / 180 }),
		"float":   f1("float", func(x float64) float64 { return x }),
		"log": {1, 2, func(a []value) (value, error) {
			l, err := logOf(a[0], "log")
			if err != nil || len(a) == 1 {
				return floatVal(l), err
			}
			lb, err := logOf(a[1], "log")
			if err != nil {
				return value{}, err
			}
			if lb == 0 {
				return value{}, errAt(0, "division by zero: log base 1")
			}
			return checkFloat(l/lb, "log")
		}},
		"log2":  {1, 1, func(a []value) (value, error) { return logBase(a[0], "log2", math.Log2, math.Ln2) }},
		"log10": {1, 1, func(a []value) (value, error) { return logBase(a[0], "log10", math.Log10, math.Ln10) }},
		"atan2": {2, 2, func(a []value) (value, error) {
			y, x, err := binaryFloats(a[0], a[1])
			if err != nil {
				return value{}, err
			}
			return checkFloat(math.Atan2(y, x), "atan2", y, x)
		}},
		"hypot": {1, -1, func(a []value) (value, error) {
			var h float64
			for _, v := range a {
				x, err := v.float()
				if err != nil {
					return value{}, err
				}
				h = math.Hypot(h, x)
			}
			return floatVal(h), nil
		}},
		"abs": {1, 1, func(a []value) (value, error) {
			if a[0].isInt() {
				return intVal(new(big.Int).Abs(a[0].i)), nil
			}
			return floatVal(math.Abs(a[0].f)), nil
		}},
		"floor": {1, 1, func(a []value) (value, error) { return toInt(a[0], math.Floor, "floor") }},
		"ceil":  {1, 1, func(a []value) (value, error) { return toInt(a[0], math.Ceil, "ceil") }},
		"trunc": {1, 1, func(a []value) (value, error) { return toInt(a[0], math.Trunc, "trunc") }},
		"int":   {1, 1, func(a []value) (value, error) { return toInt(a[0], math.Trunc, "int") }},
		"round": {1, 2, calcRound},
		"factorial": {1, 1, func(a []value) (value, error) {
			n, err := smallInt(a[0], "factorial")
			if err != nil {
				return value{}, err
			}
			if n < 0 {
				return value{}, errAt(0, "factorial() not defined for negative values")
			}
			if n > maxFactorial {
				return value{}, errAt(0, "factorial() argument larger than %d", maxFactorial)
			}
			if n < 2 {
				return int64Val(1), nil
			}
			return checkInt(new(big.Int).MulRange(1, n))
		}},
		"isqrt": {1, 1, func(a []value) (value, error) {
			if !a[0].isInt() {
				return value{}, errAt(0, "isqrt() only accepts integers")
			}
			if a[0].i.Sign() < 0 {
				return value{}, errAt(0, "isqrt() argument must be nonnegative")
			}
			return intVal(new(big.Int).Sqrt(a[0].i)), nil
		}},
		"gcd": {0, -1, func(a []value) (value, error) {
			g := new(big.Int)
			for _, v := range a {
				if !v.isInt() {
					return value{}, errAt(0, "gcd() only accepts integers")
				}
				g.GCD(nil, nil, g.Abs(g), new(big.Int).Abs(v.i))
			}
			return intVal(g), nil
		}},
		"lcm": {0, -1, func(a []value) (value, error) {
			l := big.NewInt(1)
			for _, v := range a {
				if !v.isInt() {
					return value{}, errAt(0, "lcm() only accepts integers")
				}
				x := new(big.Int).Abs(v.i)
				if x.Sign() == 0 || l.Sign() == 0 {
					l.SetInt64(0)
					continue
				}
				g := new(big.Int).GCD(nil, nil, l, x)
				l.Mul(l, x.Quo(x, g))
				if l.BitLen() > maxIntBits {
					return value{}, errAt(0, "integer result too large (more than %d digits)", maxIntDigits)
				}
			}
			return intVal(l), nil
		}},
		"min": {1, -1, func(a []value) (value, error) { return extreme(a, -1) }},
		"max": {1, -1, func(a []value) (value, error) { return extreme(a, 1) }},
		"pow": {2, 3, calcPow},
	}
}

// funcNames lists the calculator's functions for error messages.
func funcNames() string {
	names := make([]string, 0, len(calcFuncs))
	for n := range calcFuncs {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func logOf(v value, name string) (float64, error) {
	if v.isInt() {
		if v.i.Sign() <= 0 {
			return 0, errAt(0, "math domain error in %s: argument must be positive", name)
		}
		// Beyond float range, log(m·2^k) = log(m) + k·log(2) with m in
		// [0.5, 1), as Python computes it.
		if _, err := v.float(); err != nil {
			mant := new(big.Float)
			k := new(big.Float).SetInt(v.i).MantExp(mant)
			m, _ := mant.Float64()
			return math.Log(m) + math.Log(2)*float64(k), nil
		}
	}
	x, err := v.float()
	if err != nil {
		return 0, err
	}
	if x <= 0 || math.IsNaN(x) {
		if math.IsNaN(x) {
			return x, nil
		}
		return 0, errAt(0, "math domain error in %s: argument must be positive", name)
	}
	return math.Log(x), nil
}

// logBase uses the exact base-2/base-10 logarithm for values a float
// holds (log10(1000) is 3.0), and ln(x)/ln(base) beyond.
func logBase(v value, name string, g func(float64) float64, lnBase float64) (value, error) {
	if _, err := v.float(); err != nil {
		l, err := logOf(v, name)
		return floatVal(l / lnBase), err
	}
	if _, err := logOf(v, name); err != nil {
		return value{}, err
	}
	x, _ := v.float()
	return floatVal(g(x)), nil
}

// toInt rounds a float to an exact integer with g.
func toInt(v value, g func(float64) float64, name string) (value, error) {
	if v.isInt() {
		return v, nil
	}
	switch {
	case math.IsInf(v.f, 0):
		return value{}, errAt(0, "%s(): cannot convert float infinity to integer", name)
	case math.IsNaN(v.f):
		return value{}, errAt(0, "%s(): cannot convert float NaN to integer", name)
	}
	i, _ := big.NewFloat(g(v.f)).Int(nil)
	return intVal(i), nil
}

func smallInt(v value, name string) (int64, error) {
	if !v.isInt() {
		return 0, errAt(0, "%s() only accepts integers", name)
	}
	if !v.i.IsInt64() {
		return 0, errAt(0, "%s() argument out of range", name)
	}
	return v.i.Int64(), nil
}

// calcRound is Python's round: halves go to the even neighbour; with one
// argument the result is an integer, with ndigits it keeps the input's type.
func calcRound(a []value) (value, error) {
	x := a[0]
	if len(a) == 1 {
		return toInt(x, math.RoundToEven, "round")
	}
	nd, err := smallInt(a[1], "round ndigits")
	if err != nil {
		return value{}, err
	}
	if x.isInt() {
		if nd >= 0 {
			return x, nil
		}
		if -nd > int64(len(x.i.String())) {
			return int64Val(0), nil
		}
		pow := new(big.Int).Exp(big.NewInt(10), big.NewInt(-nd), nil)
		q, m := floorDivMod(x.i, pow)
		twice := new(big.Int).Lsh(m, 1)
		if c := twice.Cmp(pow); c > 0 || c == 0 && q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
		return intVal(q.Mul(q, pow)), nil
	}
	f := x.f
	if math.IsInf(f, 0) || math.IsNaN(f) || f == 0 {
		return x, nil
	}
	switch {
	case nd > 330:
		return x, nil
	case nd >= 0:
		// FormatFloat rounds the exact binary value half-to-even, as
		// Python's correctly-rounded round() does.
		r, err := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(nd), 64), 64)
		if err != nil {
			return value{}, errAt(0, "round: %v", err)
		}
		return floatVal(r), nil
	case nd < -330:
		return floatVal(math.Copysign(0, f)), nil
	}
	p := math.Pow(10, float64(-nd))
	return checkFloat(math.RoundToEven(f/p)*p, "round", f)
}

func calcPow(a []value) (value, error) {
	if len(a) == 2 {
		return arith("**", a[0], a[1])
	}
	if !a[0].isInt() || !a[1].isInt() || !a[2].isInt() {
		return value{}, errAt(0, "pow() 3rd argument not allowed unless all arguments are integers")
	}
	m := a[2].i
	if m.Sign() == 0 {
		return value{}, errAt(0, "pow() 3rd argument cannot be 0")
	}
	if a[1].i.Sign() < 0 {
		return value{}, errAt(0, "pow() with a modulus needs a non-negative exponent")
	}
	if m.BitLen() > maxModPowBits || a[1].i.BitLen() > maxModPowBits {
		return value{}, errAt(0, "pow() with a modulus is limited to %d-bit exponents and moduli", maxModPowBits)
	}
	r := new(big.Int).Exp(a[0].i, a[1].i, new(big.Int).Abs(m))
	// Python's result has the sign of the modulus.
	if r.Sign() != 0 && m.Sign() < 0 {
		r.Add(r, m)
	}
	return intVal(r), nil
}

// extreme returns the smallest (dir -1) or largest (dir 1) argument, the
// first one on ties, comparing integers and floats exactly.
func extreme(a []value, dir int) (value, error) {
	best := a[0]
	for _, v := range a[1:] {
		if c, ok := compare(v, best); ok && c == dir {
			best = v
		}
	}
	return best, nil
}

// compare orders two values exactly; ok is false when a NaN is involved.
func compare(a, b value) (int, bool) {
	if a.isInt() && b.isInt() {
		return a.i.Cmp(b.i), true
	}
	if (!a.isInt() && math.IsNaN(a.f)) || (!b.isInt() && math.IsNaN(b.f)) {
		return 0, false
	}
	return toBigFloat(a).Cmp(toBigFloat(b)), true
}

func toBigFloat(v value) *big.Float {
	if v.isInt() {
		return new(big.Float).SetInt(v.i)
	}
	return big.NewFloat(v.f)
}

// eval walks the parsed expression.
func eval(n *node) (v value, err error) {
	defer func() {
		var ce *calcError
		if errors.As(err, &ce) && ce.pos == 0 {
			ce.pos = n.pos
		}
	}()
	switch n.op {
	case "num":
		return n.num, nil
	case "name":
		if c, ok := calcConstants[n.name]; ok {
			return floatVal(c), nil
		}
		if _, ok := calcFuncs[n.name]; ok {
			return value{}, errAt(n.pos, "%s is a function: call it like %s(x)", n.name, n.name)
		}
		return value{}, errAt(n.pos, "unknown name %q (constants: e, inf, nan, pi, tau)", n.name)
	case "call":
		f, ok := calcFuncs[n.name]
		if !ok {
			if _, isConst := calcConstants[n.name]; isConst {
				return value{}, errAt(n.pos, "%s is a constant, not a function", n.name)
			}
			return value{}, errAt(n.pos, "unknown function %q (available: %s)", n.name, funcNames())
		}
		if len(n.args) < f.minArgs || (f.maxArgs >= 0 && len(n.args) > f.maxArgs) {
			return value{}, errAt(n.pos, "%s() takes %s, got %d", n.name, arity(f), len(n.args))
		}
		args := make([]value, len(n.args))
		for i, a := range n.args {
			if args[i], err = eval(a); err != nil {
				return value{}, err
			}
		}
		return f.fn(args)
	case "neg", "pos":
		x, err := eval(n.args[0])
		if err != nil || n.op == "pos" {
			return x, err
		}
		return negate(x)
	}
	a, err := eval(n.args[0])
	if err != nil {
		return value{}, err
	}
	b, err := eval(n.args[1])
	if err != nil {
		return value{}, err
	}
	return arith(n.op, a, b)
}

func arity(f calcFunc) string {
	switch {
	case f.maxArgs < 0:
		return fmt.Sprintf("at least %d argument(s)", f.minArgs)
	case f.minArgs == f.maxArgs:
		return fmt.Sprintf("%d argument(s)", f.minArgs)
	}
	return fmt.Sprintf("%d to %d arguments", f.minArgs, f.maxArgs)
}

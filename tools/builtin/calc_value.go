package builtin

import (
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Size limits keep every operation cheap: integers stay below
// maxIntDigits decimal digits, so no multiplication, power or printing can
// take more than milliseconds.
const (
	maxIntDigits  = 20000
	maxIntBits    = 66438 // ⌊maxIntDigits × log2(10)⌋: below 10**maxIntDigits
	maxFactorial  = 5000
	maxModPowBits = 4096
)

// value is an exact integer (i != nil) or a float64, as in Python.
type value struct {
	i *big.Int
	f float64
}

func intVal(i *big.Int) value  { return value{i: i} }
func int64Val(n int64) value   { return value{i: big.NewInt(n)} }
func floatVal(f float64) value { return value{f: f} }

func (v value) isInt() bool { return v.i != nil }

// float converts to float64; an integer too large for a float is an error,
// as in Python.
func (v value) float() (float64, error) {
	if !v.isInt() {
		return v.f, nil
	}
	if v.i.IsInt64() {
		n := v.i.Int64()
		if n > -(1<<53) && n < 1<<53 {
			return float64(n), nil
		}
	}
	f, _ := new(big.Float).SetInt(v.i).Float64()
	if math.IsInf(f, 0) {
		return 0, errAt(0, "integer too large to convert to float")
	}
	// big.Float.SetInt is exact (precision grows to fit) and Float64 rounds
	// to nearest even, which is what Python does.
	return f, nil
}

func checkInt(i *big.Int) (value, error) {
	if i.BitLen() > maxIntBits {
		return value{}, errAt(0, "integer result too large (more than %d digits)", maxIntDigits)
	}
	return intVal(i), nil
}

// checkFloat refuses a result that overflowed or left the domain when its
// inputs were finite numbers.
func checkFloat(f float64, what string, in ...float64) (value, error) {
	for _, x := range in {
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return floatVal(f), nil
		}
	}
	switch {
	case math.IsNaN(f):
		return value{}, errAt(0, "math domain error in %s", what)
	case math.IsInf(f, 0):
		return value{}, errAt(0, "numerical result out of range in %s", what)
	}
	return floatVal(f), nil
}

func binaryFloats(a, b value) (float64, float64, error) {
	x, err := a.float()
	if err != nil {
		return 0, 0, err
	}
	y, err := b.float()
	if err != nil {
		return 0, 0, err
	}
	return x, y, nil
}

func arith(op string, a, b value) (value, error) {
	if a.isInt() && b.isInt() {
		return intArith(op, a.i, b.i)
	}
	if op == "**" {
		return floatPow(a, b)
	}
	x, y, err := binaryFloats(a, b)
	if err != nil {
		return value{}, err
	}
	var r float64
	switch op {
	case "+":
		r = x + y
	case "-":
		r = x - y
	case "*":
		r = x * y
	case "/":
		if y == 0 {
			return value{}, errAt(0, "division by zero")
		}
		r = x / y
	case "//":
		if y == 0 {
			return value{}, errAt(0, "integer division or modulo by zero")
		}
		r = pyFloorDiv(x, y)
	case "%":
		if y == 0 {
			return value{}, errAt(0, "integer division or modulo by zero")
		}
		r = pyFloatMod(x, y)
	}
	return checkFloat(r, "'"+op+"'", x, y)
}

// pyFloorDiv is Python's float //, computed as CPython's float_divmod does.
func pyFloorDiv(x, y float64) float64 {
	mod := math.Mod(x, y)
	div := (x - mod) / y
	if mod != 0 && (y < 0) != (mod < 0) {
		div--
	}
	if div == 0 {
		return math.Copysign(0, x/y)
	}
	fd := math.Floor(div)
	if div-fd > 0.5 {
		fd++
	}
	return fd
}

// pyFloatMod is Python's float %: the result has the sign of the divisor.
func pyFloatMod(x, y float64) float64 {
	m := math.Mod(x, y)
	if m != 0 && (m < 0) != (y < 0) {
		m += y
	}
	if m == 0 {
		m = math.Copysign(0, y)
	}
	return m
}

func intArith(op string, a, b *big.Int) (value, error) {
	switch op {
	case "+":
		return checkInt(new(big.Int).Add(a, b))
	case "-":
		return checkInt(new(big.Int).Sub(a, b))
	case "*":
		return checkInt(new(big.Int).Mul(a, b))
	case "/":
		if b.Sign() == 0 {
			return value{}, errAt(0, "division by zero")
		}
		// True division, correctly rounded as Python does.
		f, _ := new(big.Rat).SetFrac(a, b).Float64()
		if math.IsInf(f, 0) {
			return value{}, errAt(0, "integer division result too large for a float")
		}
		return floatVal(f), nil
	case "//", "%":
		if b.Sign() == 0 {
			return value{}, errAt(0, "integer division or modulo by zero")
		}
		q, m := floorDivMod(a, b)
		if op == "//" {
			return intVal(q), nil
		}
		return intVal(m), nil
	case "**":
		return intPow(a, b)
	}
	return value{}, errAt(0, "unknown operator %q", op)
}

// floorDivMod is Python's divmod on integers: the quotient rounds toward
// negative infinity and the remainder has the sign of the divisor.
func floorDivMod(a, b *big.Int) (*big.Int, *big.Int) {
	q, m := new(big.Int).QuoRem(a, b, new(big.Int))
	if m.Sign() != 0 && m.Sign() != b.Sign() {
		q.Sub(q, big.NewInt(1))
		m.Add(m, b)
	}
	return q, m
}

func intPow(a, b *big.Int) (value, error) {
	if b.Sign() < 0 {
		if a.Sign() == 0 {
			return value{}, errAt(0, "0 cannot be raised to a negative power")
		}
		return floatPow(intVal(a), intVal(b))
	}
	// Trivial bases first: their powers stay small whatever the exponent.
	switch {
	case a.Sign() == 0:
		if b.Sign() == 0 {
			return int64Val(1), nil
		}
		return int64Val(0), nil
	case a.IsInt64() && a.Int64() == 1:
		return int64Val(1), nil
	case a.IsInt64() && a.Int64() == -1:
		if b.Bit(0) == 0 {
			return int64Val(1), nil
		}
		return int64Val(-1), nil
	}
	if !b.IsInt64() || b.Int64() > maxIntBits {
		return value{}, errAt(0, "integer result too large (more than %d digits)", maxIntDigits)
	}
	e := b.Int64()
	// |a|**e has about (bitlen(a)-1)*e+1 .. bitlen(a)*e bits.
	if int64(a.BitLen()-1)*e >= maxIntBits {
		return value{}, errAt(0, "integer result too large (more than %d digits)", maxIntDigits)
	}
	return checkInt(new(big.Int).Exp(a, b, nil))
}

func floatPow(a, b value) (value, error) {
	x, y, err := binaryFloats(a, b)
	if err != nil {
		return value{}, err
	}
	if x == 0 && y < 0 {
		return value{}, errAt(0, "0.0 cannot be raised to a negative power")
	}
	if x < 0 && y != math.Trunc(y) && !math.IsInf(y, 0) {
		return value{}, errAt(0, "negative number cannot be raised to a fractional power (the result is complex)")
	}
	return checkFloat(powFloat(x, y), "'**'", x, y)
}

// powFloat is x**y. For whole exponents it multiplies in 256-bit precision
// and rounds once, so results are correctly rounded as C's pow (which
// Python uses) gives them; math.Pow can be an ulp off there. Fractional
// exponents use math.Pow, which may differ from CPython in the last digit.
func powFloat(x, y float64) float64 {
	if y != math.Trunc(y) || math.Abs(y) > 4096 || x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return math.Pow(x, y)
	}
	n := int64(math.Abs(y))
	const prec = 256
	base := new(big.Float).SetPrec(prec).SetFloat64(x)
	acc := new(big.Float).SetPrec(prec).SetInt64(1)
	for ; n > 0; n >>= 1 {
		if n&1 == 1 {
			acc.Mul(acc, base)
		}
		base.Mul(base, base)
	}
	if y < 0 {
		acc.Quo(new(big.Float).SetPrec(prec).SetInt64(1), acc)
	}
	f, _ := acc.Float64()
	return f
}

func negate(v value) (value, error) {
	if v.isInt() {
		return intVal(new(big.Int).Neg(v.i)), nil
	}
	return floatVal(-v.f), nil
}

// format prints integers in full and floats as Python's repr does: the
// shortest string that reads back to the same float, with ".0" on whole
// numbers and exponent form outside 1e-4 <= |x| < 1e16.
func (v value) format() string {
	if v.isInt() {
		return v.i.String()
	}
	f := v.f
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}

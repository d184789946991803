package builtin

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The calculator's grammar follows Python's precedence:
//
//	expr    = term { ("+" | "-") term }
//	term    = unary { ("*" | "/" | "//" | "%") unary }
//	unary   = ("+" | "-") unary | power
//	power   = primary [ "**" unary ]          (right-associative, -2**2 == -4)
//	primary = number | name | name "(" [ expr { "," expr } ] ")" | "(" expr ")"
//
// Nothing is ever evaluated by a host interpreter: the input is tokenised and
// parsed here, then walked by eval.

const (
	maxCalcInput = 1000
	maxCalcDepth = 100
)

// calcError is a user mistake (syntax, domain, size); pos is the 1-based
// column, 0 when unknown.
type calcError struct {
	pos int
	msg string
}

func (e *calcError) Error() string {
	if e.pos > 0 {
		return fmt.Sprintf("%s (at position %d)", e.msg, e.pos)
	}
	return e.msg
}

func errAt(pos int, format string, args ...any) *calcError {
	return &calcError{pos: pos, msg: fmt.Sprintf(format, args...)}
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokNum
	tokName
	tokOp // + - * / // % ** ( ) ,
)

type token struct {
	kind tokKind
	text string
	pos  int // 1-based column (in runes)
}

func tokenize(s string) ([]token, error) {
	var toks []token
	col := 0
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		col++
		switch {
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			i += w
		case r >= '0' && r <= '9' || r == '.':
			j := scanNumber(s, i)
			if j == i {
				return nil, errAt(col, "unexpected %q", r)
			}
			toks = append(toks, token{tokNum, s[i:j], col})
			col += j - i - 1
			i = j
		case r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			j := i
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			toks = append(toks, token{tokName, s[i:j], col})
			col += j - i - 1
			i = j
		case strings.HasPrefix(s[i:], "**") || strings.HasPrefix(s[i:], "//"):
			toks = append(toks, token{tokOp, s[i : i+2], col})
			col++
			i += 2
		case strings.ContainsRune("+-*/%(),", r):
			toks = append(toks, token{tokOp, string(r), col})
			i += w
		case r == '^':
			return nil, errAt(col, "'^' is not supported: use ** for powers")
		case r == utf8.RuneError && w == 1:
			return nil, errAt(col, "invalid UTF-8 in expression")
		default:
			return nil, errAt(col, "unexpected character %q", r)
		}
	}
	toks = append(toks, token{kind: tokEOF, pos: col + 1})
	return toks, nil
}

// scanNumber returns the end of the numeric literal starting at i: decimal
// integers, 0x/0o/0b integers, and floats with an optional exponent.
// Underscores between digits are allowed, as in Python.
func scanNumber(s string, i int) int {
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' || c == '_' }
	j := i
	if j+1 < len(s) && s[j] == '0' && strings.ContainsRune("xXoObB", rune(s[j+1])) {
		j += 2
		for j < len(s) && (isDigit(s[j]) || s[j] >= 'a' && s[j] <= 'f' || s[j] >= 'A' && s[j] <= 'F') {
			j++
		}
		return j
	}
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j < len(s) && s[j] == '.' {
		j++
		for j < len(s) && isDigit(s[j]) {
			j++
		}
	}
	if j == i+1 && s[i] == '.' {
		return i // a lone "."
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && s[k] >= '0' && s[k] <= '9' {
			for k < len(s) && isDigit(s[k]) {
				k++
			}
			j = k
		}
	}
	return j
}

// node is the parsed expression.
type node struct {
	op   string // "num", "name", "call", "neg", "pos", or a binary operator
	pos  int
	num  value
	name string
	args []*node
}

type parser struct {
	toks  []token
	i     int
	depth int
}

func parseExpr(s string) (*node, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errAt(0, "empty expression")
	}
	if len(s) > maxCalcInput {
		return nil, errAt(0, "expression is %d bytes, more than the %d allowed", len(s), maxCalcInput)
	}
	toks, err := tokenize(s)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, errAt(t.pos, "unexpected %s", describeTok(t))
	}
	return n, nil
}

func describeTok(t token) string {
	if t.kind == tokEOF {
		return "end of expression"
	}
	return fmt.Sprintf("%q", t.text)
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) isOp(ops ...string) bool {
	t := p.peek()
	if t.kind != tokOp {
		return false
	}
	for _, o := range ops {
		if t.text == o {
			return true
		}
	}
	return false
}

func (p *parser) enter(pos int) error {
	p.depth++
	if p.depth > maxCalcDepth {
		return errAt(pos, "expression nested more than %d levels deep", maxCalcDepth)
	}
	return nil
}

func (p *parser) expr() (*node, error) {
	if err := p.enter(p.peek().pos); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	left, err := p.term()
	if err != nil {
		return nil, err
	}
	for p.isOp("+", "-") {
		t := p.next()
		right, err := p.term()
		if err != nil {
			return nil, err
		}
		left = &node{op: t.text, pos: t.pos, args: []*node{left, right}}
	}
	return left, nil
}

func (p *parser) term() (*node, error) {
	left, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.isOp("*", "/", "//", "%") {
		t := p.next()
		right, err := p.unary()
		if err != nil {
			return nil, err
		}
		left = &node{op: t.text, pos: t.pos, args: []*node{left, right}}
	}
	return left, nil
}

func (p *parser) unary() (*node, error) {
	if p.isOp("-", "+") {
		t := p.next()
		if err := p.enter(t.pos); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		operand, err := p.unary()
		if err != nil {
			return nil, err
		}
		op := "neg"
		if t.text == "+" {
			op = "pos"
		}
		return &node{op: op, pos: t.pos, args: []*node{operand}}, nil
	}
	return p.power()
}

func (p *parser) power() (*node, error) {
	base, err := p.primary()
	if err != nil {
		return nil, err
	}
	if p.isOp("**") {
		t := p.next()
		if err := p.enter(t.pos); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		exp, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &node{op: "**", pos: t.pos, args: []*node{base, exp}}, nil
	}
	return base, nil
}

func (p *parser) primary() (*node, error) {
	t := p.next()
	switch {
	case t.kind == tokNum:
		v, err := parseNumber(t.text)
		if err != nil {
			return nil, errAt(t.pos, "%v", err)
		}
		return &node{op: "num", pos: t.pos, num: v}, nil
	case t.kind == tokName:
		if !p.isOp("(") {
			return &node{op: "name", pos: t.pos, name: t.text}, nil
		}
		p.next()
		n := &node{op: "call", pos: t.pos, name: t.text}
		if p.isOp(")") {
			p.next()
			return n, nil
		}
		for {
			arg, err := p.expr()
			if err != nil {
				return nil, err
			}
			n.args = append(n.args, arg)
			if p.isOp(",") {
				p.next()
				continue
			}
			if p.isOp(")") {
				p.next()
				return n, nil
			}
			u := p.peek()
			return nil, errAt(u.pos, "expected ',' or ')' in call to %s, found %s", t.text, describeTok(u))
		}
	case t.kind == tokOp && t.text == "(":
		n, err := p.expr()
		if err != nil {
			return nil, err
		}
		if !p.isOp(")") {
			u := p.peek()
			return nil, errAt(u.pos, "expected ')' to close '(' at position %d, found %s", t.pos, describeTok(u))
		}
		p.next()
		return n, nil
	}
	return nil, errAt(t.pos, "expected a number, name or '(', found %s", describeTok(t))
}

func parseNumber(text string) (value, error) {
	if strings.HasPrefix(text, "_") || strings.HasSuffix(text, "_") || strings.Contains(text, "__") {
		return value{}, fmt.Errorf("invalid number %q", text)
	}
	clean := strings.ReplaceAll(text, "_", "")
	isFloat := !strings.HasPrefix(strings.ToLower(clean), "0x") && strings.ContainsAny(clean, ".eE")
	if isFloat {
		f, err := strconv.ParseFloat(clean, 64)
		if err != nil && !isRangeErr(err) {
			return value{}, fmt.Errorf("invalid number %q", text)
		}
		return floatVal(f), nil
	}
	if len(clean) > 1 && clean[0] == '0' && clean[1] >= '0' && clean[1] <= '9' {
		if strings.Trim(clean, "0") != "" {
			return value{}, fmt.Errorf("invalid number %q: leading zeros are not allowed (use 0o for octal)", text)
		}
	}
	i, ok := new(big.Int).SetString(clean, 0)
	if !ok {
		return value{}, fmt.Errorf("invalid number %q", text)
	}
	return intVal(i), nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

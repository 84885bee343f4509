package rewrite

import (
	"errors"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"
)

// In BIG5, CP932, GBK, GB18030 and SJIS the second byte of a character can
// be an ASCII byte, among them the backslash and the backquote: the server
// reads 0xbf 0x5c as one character where a byte-wise lexer sees an escape.
// Statements in those character sets are rewritten in UTF-8 and converted
// back; every other character set the server accepts from a client keeps
// bytes >= 0x80 apart from ASCII, so its statements are lexed as they are.
var multiByteASCIITrail = map[string]encoding.Encoding{
	"big5":    traditionalchinese.Big5,
	"cp932":   japanese.ShiftJIS,
	"gbk":     simplifiedchinese.GBK,
	"gb18030": simplifiedchinese.GB18030,
	"sjis":    japanese.ShiftJIS,
}

var errCharset = errors.New("rewrite: statement is not valid in the client's character set")

// transcoding converts a statement between the client's character set and
// the UTF-8 the rewriter works in. The zero value does nothing.
type transcoding struct{ enc encoding.Encoding }

// toUTF8 decides how sql, sent in charset, is rewritten. It returns the text
// to rewrite and the conversion back, or an error when the rewriter cannot
// tell where its strings end.
func toUTF8(sql, charset string) (string, transcoding, error) {
	high := false
	for i := 0; i < len(sql); i++ {
		if sql[i] >= 0x80 {
			high = true
			break
		}
	}
	if !high {
		return sql, transcoding{}, nil
	}
	if charset == "" {
		// Character set unknown: only a statement without a backslash and
		// a backquote is safe to lex byte by byte.
		if !utf8.ValidString(sql) && strings.ContainsAny(sql, "\\`") {
			return "", transcoding{}, errors.New("rewrite: non-UTF-8 statement with a backslash (client character set unknown)")
		}
		return sql, transcoding{}, nil
	}
	enc, ok := multiByteASCIITrail[charset]
	if !ok {
		return sql, transcoding{}, nil
	}
	u, err := enc.NewDecoder().String(sql)
	if err != nil || strings.ContainsRune(u, utf8.RuneError) {
		return "", transcoding{}, errCharset
	}
	back, err := enc.NewEncoder().String(u)
	if err != nil || back != sql {
		return "", transcoding{}, errCharset
	}
	return u, transcoding{enc: enc}, nil
}

// plans converts the SQL of plans back to the client's character set.
func (t transcoding) plans(plans []Plan) ([]Plan, error) {
	if t.enc == nil {
		return plans, nil
	}
	e := t.enc.NewEncoder()
	conv := func(s string) (string, error) {
		if s == "" {
			return s, nil
		}
		out, err := e.String(s)
		if err != nil {
			return "", errCharset
		}
		return out, nil
	}
	for i := range plans {
		if err := plans[i].mapSQL(conv); err != nil {
			return nil, err
		}
	}
	return plans, nil
}

package s3

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// s3Namespace is the XML namespace of S3's request and response documents.
const s3Namespace = "http://s3.amazonaws.com/doc/2006-03-01/"

// maxDeleteObjects is S3's limit on the objects of one DeleteObjects request.
const maxDeleteObjects = 1000

// deleteObjectFields are the children S3 defines for <Object> in a
// DeleteObjects body; each may appear at most once and holds text only.
// <ETag>, <LastModifiedTime> and <Size> are S3's conditional-delete fields.
var deleteObjectFields = map[string]bool{
	"Key": true, "VersionId": true, "ETag": true, "LastModifiedTime": true, "Size": true,
}

// parseDeleteDoc parses a DeleteObjects body.
//
// The gateway fences the keys it reads here and forwards the body byte for
// byte, so any document that another XML reader could understand as naming
// different objects is a way around the fence: with
// <Object><Key>fenced</Key><Key>fresh</Key></Object> encoding/xml keeps the
// last key, a store that keeps the first deletes a fenced object. The parser therefore accepts only the plain shape S3
// documents and refuses everything else as MalformedXML:
//
//   - an optional <?xml?> declaration, then exactly one <Delete> root in no
//     namespace or S3's, with no attribute but xmlns="<S3 namespace>", and
//     nothing but whitespace after it;
//   - in <Delete>, 1 to 1000 <Object> and at most one <Quiet>;
//   - in <Object>, exactly one non-empty <Key> and at most one each of
//     <VersionId>, <ETag>, <LastModifiedTime>, <Size>, all text only;
//   - no namespace prefixes, attributes on children, comments, processing
//     instructions, DOCTYPE or other directives, and no text between
//     elements but whitespace.
//
// Character data split by CDATA sections is joined, as every conforming
// reader does. Entities are the five predefined ones and character
// references (encoding/xml in strict mode refuses the rest).
func parseDeleteDoc(body []byte) (*deleteDoc, *s3Error) {
	d := xml.NewDecoder(bytes.NewReader(body))
	d.Strict = true
	p := deleteParser{d: d}
	doc, err := p.parse()
	if err != nil {
		return nil, errMalformedXML("DeleteObjects body: " + err.Error())
	}
	return doc, nil
}

// deleteDoc is a parsed DeleteObjects body: what the gateway needs to write
// it anew with per-object <ETag> conditions (conditions.go).
type deleteDoc struct {
	quiet   *string // <Quiet>'s text, nil if absent
	objects []deleteObject
}

// deleteObject is one <Object>: its fields' text, by element name, and
// their order in the body.
type deleteObject struct {
	fields map[string]string
	order  []string
}

type deleteParser struct {
	d     *xml.Decoder
	first bool // a token has been read
}

// next returns the next token, refusing the kinds of token the document
// never needs.
func (p *deleteParser) next() (xml.Token, error) {
	tok, err := p.d.Token()
	if err != nil {
		var se *xml.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("not well-formed XML (line %d)", se.Line)
		}
		if err == io.EOF {
			return nil, err
		}
		return nil, errors.New("not well-formed XML")
	}
	first := !p.first
	p.first = true
	switch t := tok.(type) {
	case xml.ProcInst:
		if first && t.Target == "xml" {
			return p.next()
		}
		return nil, errors.New("processing instructions are not allowed")
	case xml.Directive:
		return nil, errors.New("DOCTYPE and other directives are not allowed")
	case xml.Comment:
		return nil, errors.New("comments are not allowed")
	case xml.StartElement:
		if t.Name.Space != "" && t.Name.Space != s3Namespace {
			return nil, errors.New("element <" + short(t.Name.Local) + "> is in a foreign namespace or has a prefix")
		}
		for _, a := range t.Attr {
			if a.Name.Space != "" || a.Name.Local != "xmlns" || a.Value != s3Namespace {
				return nil, errors.New("element <" + short(t.Name.Local) + "> has an attribute other than the S3 xmlns")
			}
		}
		// A repeated attribute (encoding/xml does not refuse it) or one
		// on a child element is refused too.
		if len(t.Attr) > 1 {
			return nil, errors.New("element <" + short(t.Name.Local) + "> repeats an attribute")
		}
	case xml.EndElement:
		if t.Name.Space != "" && t.Name.Space != s3Namespace {
			return nil, errors.New("element </" + short(t.Name.Local) + "> is in a foreign namespace or has a prefix")
		}
	}
	return tok, nil
}

// short bounds the client's text echoed in a refusal.
func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func isSpace(b []byte) bool { return len(bytes.TrimLeft(b, " \t\r\n")) == 0 }

func (p *deleteParser) parse() (*deleteDoc, error) {
	// Prolog: whitespace, then the root.
	for {
		tok, err := p.next()
		if err == io.EOF {
			return nil, errors.New("no <Delete> element")
		}
		if err != nil {
			return nil, err
		}
		if cd, ok := tok.(xml.CharData); ok && isSpace(cd) {
			continue
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "Delete" {
			return nil, errors.New("the root element must be <Delete>")
		}
		break
	}
	doc := &deleteDoc{}
	err := p.children("Delete", func(t xml.StartElement) error {
		switch t.Name.Local {
		case "Object":
			if len(doc.objects) == maxDeleteObjects {
				return errors.New("more than " + strconv.Itoa(maxDeleteObjects) + " objects")
			}
			o, err := p.object()
			if err != nil {
				return err
			}
			doc.objects = append(doc.objects, o)
		case "Quiet":
			if doc.quiet != nil {
				return errors.New("<Quiet> given twice")
			}
			q, err := p.text("Quiet")
			if err != nil {
				return err
			}
			doc.quiet = &q
		default:
			return errors.New("unknown element <" + short(t.Name.Local) + "> in <Delete>")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(doc.objects) == 0 {
		return nil, errors.New("no <Object>")
	}
	// Epilog: whitespace only, up to the end of the body.
	for {
		tok, err := p.next()
		if err == io.EOF {
			return doc, nil
		}
		if err != nil {
			return nil, err
		}
		if cd, ok := tok.(xml.CharData); !ok || !isSpace(cd) {
			return nil, errors.New("content after </Delete>")
		}
	}
}

// object reads the children of an <Object> up to its end tag.
func (p *deleteParser) object() (deleteObject, error) {
	o := deleteObject{fields: map[string]string{}}
	err := p.children("Object", func(t xml.StartElement) error {
		name := t.Name.Local
		if !deleteObjectFields[name] {
			return errors.New("unknown element <" + short(name) + "> in <Object>")
		}
		if _, seen := o.fields[name]; seen {
			return errors.New("<" + name + "> given twice in one <Object>")
		}
		s, err := p.text(name)
		if err != nil {
			return err
		}
		o.fields[name] = s
		o.order = append(o.order, name)
		return nil
	})
	if err == nil && o.fields["Key"] == "" {
		err = errors.New("<Object> without a <Key>")
	}
	return o, err
}

// children reads the children of element name up to its end tag: white
// space between them, and each child element (which has no attributes)
// handed to child.
func (p *deleteParser) children(name string, child func(xml.StartElement) error) error {
	for {
		tok, err := p.next()
		if err == io.EOF {
			return errors.New("unterminated <" + name + ">")
		}
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case xml.CharData:
			if !isSpace(t) {
				return errors.New("text directly inside <" + name + ">")
			}
		case xml.StartElement:
			if len(t.Attr) > 0 {
				return errors.New("attributes are allowed on <Delete> only")
			}
			if err := child(t); err != nil {
				return err
			}
		case xml.EndElement:
			return nil
		}
	}
}

// text reads the character data of a text-only element up to its end tag.
func (p *deleteParser) text(name string) (string, error) {
	var b strings.Builder
	for {
		tok, err := p.next()
		if err == io.EOF {
			return "", errors.New("unterminated <" + name + ">")
		}
		if err != nil {
			return "", err
		}
		switch t := tok.(type) {
		case xml.CharData:
			b.Write(t)
		case xml.EndElement:
			return b.String(), nil
		default:
			return "", errors.New("<" + name + "> must hold text only")
		}
	}
}

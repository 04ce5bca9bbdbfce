package diagnose

import (
	"math"
	"regexp"
	"strconv"
	"testing"
)

// The page's idle and unknown colours tell apart at a glance (CIE76 ΔE of
// at least 25, in the light and the dark scheme), carry the tags' white
// text (contrast 4.5:1) and stand out of the card as timeline bars (3:1).
func TestPageIdleAndUnknownColoursDiffer(t *testing.T) {
	find := func(name string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`--`+name+`: #([0-9a-f]{6}|[0-9a-f]{3});`).FindAllStringSubmatch(pageStyle, -1) {
			c := m[1]
			if len(c) == 3 {
				c = string([]byte{c[0], c[0], c[1], c[1], c[2], c[2]})
			}
			out = append(out, "#"+c)
		}
		return out
	}
	idle, unknown, card := find("idle"), find("unknown"), find("card")
	// The light scheme's, then the dark one's (print's are not drawn on
	// a screen).
	if len(idle) < 2 || len(unknown) < 2 || len(card) < 2 {
		t.Fatalf("want a light and a dark --idle, --unknown and --card in page.css: %v %v %v", idle, unknown, card)
	}
	for i, scheme := range []string{"light", "dark"} {
		if d := deltaE(idle[i], unknown[i]); d < 25 {
			t.Errorf("%s: idle %s and unknown %s differ by ΔE %.1f", scheme, idle[i], unknown[i], d)
		}
		for _, c := range []string{idle[i], unknown[i]} {
			if r := contrast("#ffffff", c); r < 4.5 {
				t.Errorf("%s: white text on %s: contrast %.2f", scheme, c, r)
			}
			if r := contrast(card[i], c); r < 3 {
				t.Errorf("%s: %s on the card %s: contrast %.2f", scheme, c, card[i], r)
			}
		}
	}
}

func linearRGB(hex string) [3]float64 {
	var c [3]float64
	for i := range c {
		v, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		x := float64(v) / 255
		if x <= 0.04045 {
			c[i] = x / 12.92
		} else {
			c[i] = math.Pow((x+0.055)/1.055, 2.4)
		}
	}
	return c
}

func luminance(hex string) float64 {
	c := linearRGB(hex)
	return 0.2126*c[0] + 0.7152*c[1] + 0.0722*c[2]
}

// contrast is WCAG's contrast ratio.
func contrast(a, b string) float64 {
	x, y := luminance(a), luminance(b)
	return (max(x, y) + 0.05) / (min(x, y) + 0.05)
}

func lab(hex string) [3]float64 {
	c := linearRGB(hex)
	x := (0.4124*c[0] + 0.3576*c[1] + 0.1805*c[2]) / 0.95047
	y := 0.2126*c[0] + 0.7152*c[1] + 0.0722*c[2]
	z := (0.0193*c[0] + 0.1192*c[1] + 0.9505*c[2]) / 1.08883
	f := func(t float64) float64 {
		if t > 0.008856 {
			return math.Cbrt(t)
		}
		return 7.787*t + 16.0/116
	}
	return [3]float64{116*f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))}
}

func deltaE(a, b string) float64 {
	p, q := lab(a), lab(b)
	return math.Sqrt((p[0]-q[0])*(p[0]-q[0]) + (p[1]-q[1])*(p[1]-q[1]) + (p[2]-q[2])*(p[2]-q[2]))
}
